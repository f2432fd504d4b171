package guestprof

import (
	"bufio"
	"cmp"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// kernelBase is where the kernel's addresses start on x86-64 (its text
// and modules); lower ones are user space, or the firmware's and the
// kernel decompressor's identity-mapped code.
const kernelBase = 0xffff_8000_0000_0000

// kaslrAlign is the granularity of the kernel's randomized base.
const kaslrAlign = 2 << 20

// KernelSymbols are a kernel's text symbols, from its System.map.
type KernelSymbols struct {
	addrs []uint64
	names []string
}

// ReadSystemMap reads a System.map: "address type name" lines.
func ReadSystemMap(r io.Reader) (*KernelSymbols, error) {
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			return nil, fmt.Errorf("System.map line %d: %q is not \"address type name\"", line, sc.Text())
		}
		if !strings.ContainsAny(f[1], "tTwW") {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("System.map line %d: address %q: %w", line, f[0], err)
		}
		syms = append(syms, sym{a, f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("System.map has no text symbols")
	}
	slices.SortFunc(syms, func(a, b sym) int { return cmp.Compare(a.addr, b.addr) })
	k := &KernelSymbols{}
	for _, s := range syms {
		k.addrs, k.names = append(k.addrs, s.addr), append(k.names, s.name)
	}
	return k, nil
}

// lookup returns the symbol at or before addr and addr's offset in it.
func (k *KernelSymbols) lookup(addr uint64) (string, uint64) {
	i, found := slices.BinarySearch(k.addrs, addr)
	if !found {
		i--
	}
	if i < 0 {
		return "?", 0
	}
	return k.names[i], addr - k.addrs[i]
}

// Offset finds the kernel's randomized offset from samples: the multiple
// of 2 MiB that puts each of the most frequent kernel addresses within a
// few instructions' reach of a symbol. Hot addresses sit in loops, which
// are short, so a wrong offset misses for one of them.
func (k *KernelSymbols) Offset(samples []Sample) (uint64, error) {
	counts := map[uint64]int{}
	for _, s := range samples {
		if s.RIP >= kernelBase {
			counts[s.RIP]++
		}
	}
	hot := slices.SortedFunc(maps.Keys(counts), func(a, b uint64) int { return cmp.Or(counts[b]-counts[a], cmp.Compare(a, b)) })
	hot = hot[:min(len(hot), 6)]
	if len(hot) == 0 {
		return 0, fmt.Errorf("no sample is in the kernel")
	}
	const reach = 0x800
	for off := uint64(0); off < 1<<30; off += kaslrAlign {
		if !slices.ContainsFunc(hot, func(a uint64) bool { _, in := k.lookup(a - off); return in >= reach }) {
			return off, nil
		}
	}
	return 0, fmt.Errorf("no kernel offset puts the hottest kernel addresses near symbols: is System.map this kernel's?")
}

// GoSymbols are a Go binary's functions, from its pclntab (which even a
// stripped binary keeps).
type GoSymbols struct {
	table *gosym.Table
}

// ReadGoBinary reads the function table of the Go ELF binary at path.
func ReadGoBinary(path string) (*GoSymbols, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil, fmt.Errorf("%s: not a Go binary (no .gopclntab or .text)", path)
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &GoSymbols{table: table}, nil
}

func (g *GoSymbols) lookup(pc uint64) string {
	if fn := g.table.PCToFunc(pc); fn != nil {
		return fn.Name
	}
	return "?"
}

// Process is the samples from a Go process's first run on, in its own
// code or in the kernel, until another process runs its own code.
type Process struct {
	Name    string
	CR3     uint64
	Samples []Sample
	symbols *GoSymbols
}

// Report is where the samples fell.
type Report struct {
	// Firmware is how many samples came before the kernel's first: the
	// firmware's, the boot stub's and the kernel decompressor's.
	Firmware int
	// Boot are the samples from the kernel's first to the first process.
	Boot []Sample
	// Processes are the Go processes, in the order they first ran.
	Processes []Process
	kernel    *KernelSymbols
	offset    uint64
}

// Binary is a Go process's name and its binary's symbols.
type Binary struct {
	Name    string
	Symbols *GoSymbols
}

// Analyze splits samples into the firmware, the kernel's boot and the Go
// processes that ran, which it names after binaries in the order given
// (init, then the node that init starts): a process is a page table
// whose user-space addresses are Go text.
func Analyze(samples []Sample, kernel *KernelSymbols, binaries []Binary) (*Report, error) {
	off, err := kernel.Offset(samples)
	if err != nil {
		return nil, err
	}
	r := &Report{kernel: kernel, offset: off}
	first := slices.IndexFunc(samples, func(s Sample) bool { return s.RIP >= kernelBase })
	r.Firmware = first
	cur := -1
	for _, s := range samples[first:] {
		if isGoText(s.RIP) && s.CR3 != 0 {
			i := slices.IndexFunc(r.Processes, func(p Process) bool { return p.CR3 == s.CR3 })
			if i < 0 && len(r.Processes) < len(binaries) {
				b := binaries[len(r.Processes)]
				r.Processes = append(r.Processes, Process{Name: b.Name, CR3: s.CR3, symbols: b.Symbols})
				i = len(r.Processes) - 1
			}
			if i >= 0 {
				cur = i
			}
		}
		if cur < 0 {
			r.Boot = append(r.Boot, s)
			continue
		}
		r.Processes[cur].Samples = append(r.Processes[cur].Samples, s)
	}
	return r, nil
}

// isGoText says whether addr is in the text of a static Go binary as the
// Go linker places it on amd64 (from 0x401000), as against the
// firmware's and the decompressor's addresses.
func isGoText(addr uint64) bool { return addr >= 0x40_1000 && addr < 0x1000_0000 }

// Write prints, for the kernel's boot and each process, the share of its
// samples in the kernel and in user space and the top functions of each.
func (r *Report) Write(w io.Writer, top int) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "kernel offset %#x; %d samples in the firmware\n", r.offset, r.Firmware)
	r.writeSpan(bw, "kernel boot, until the first process", r.Boot, nil, top)
	for _, p := range r.Processes {
		r.writeSpan(bw, fmt.Sprintf("%s (cr3 %#x)", p.Name, p.CR3), p.Samples, p.symbols, top)
	}
	return bw.Flush()
}

func (r *Report) writeSpan(w io.Writer, title string, samples []Sample, user *GoSymbols, top int) {
	kernel, own := map[string]int{}, map[string]int{}
	var nk, nu int
	for _, s := range samples {
		switch {
		case s.RIP >= kernelBase:
			name, _ := r.kernel.lookup(s.RIP - r.offset)
			kernel[name]++
			nk++
		case user != nil && isGoText(s.RIP):
			own[user.lookup(s.RIP)]++
			nu++
		}
	}
	fmt.Fprintf(w, "\n== %s: %d samples, %d in the kernel, %d in its own code\n", title, len(samples), nk, nu)
	writeTop(w, "kernel", kernel, top)
	writeTop(w, "user", own, top)
	writeTop(w, "user package", packages(own), top)
}

// packages sums function counts by Go package.
func packages(funcs map[string]int) map[string]int {
	pkgs := map[string]int{}
	for name, n := range funcs {
		slash := strings.LastIndex(name, "/")
		pkg := name
		if dot := strings.Index(name[slash+1:], "."); dot >= 0 {
			pkg = name[:slash+1+dot]
		}
		pkgs[pkg] += n
	}
	return pkgs
}

func writeTop(w io.Writer, kind string, counts map[string]int, top int) {
	names := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	for _, name := range names[:min(len(names), top)] {
		fmt.Fprintf(w, "  %-12s %5d  %s\n", kind, counts[name], name)
	}
}
