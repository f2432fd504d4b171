package guestprof

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// registers is a reply to 'g' with rip and cr3 set and the rest zero.
func registers(rip, cr3 uint64) string {
	b := make([]byte, cr3Offset/2+8+64)
	binary.LittleEndian.PutUint64(b[ripOffset/2:], rip)
	binary.LittleEndian.PutUint64(b[cr3Offset/2:], cr3)
	return hex.EncodeToString(b)
}

// gdbstub answers as QEMU's does on a unix socket, for stops samples,
// then closes; corrupt sends the registers with a wrong checksum.
func gdbstub(t *testing.T, stops int, corrupt bool) string {
	path := filepath.Join(t.TempDir(), "gdb.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		reply := func(body string) { fmt.Fprintf(conn, "+$%s#%02x", body, checksum(body)) }
		for n := 0; n < stops; {
			c, err := r.ReadByte()
			if err != nil {
				return
			}
			switch c {
			case 0x03:
				reply("T05thread:p01.01;")
			case '$':
				cmd, _ := r.ReadString('#')
				r.Discard(2)
				switch strings.TrimSuffix(cmd, "#") {
				case "QStartNoAckMode":
					reply("OK")
				case "g":
					regs := registers(0xffffffff81000011+uint64(n), 0x1000*uint64(n+1))
					if corrupt {
						fmt.Fprintf(conn, "$%s#00", regs)
						continue
					}
					reply(regs)
					n++
				}
			}
		}
	}()
	return path
}

func TestRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool
		want    int
		err     string
	}{
		{"until QEMU goes", false, 3, ""},
		{"a corrupt packet", true, 0, "checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			samples, err := Record(ctx, gdbstub(t, 3, tc.corrupt), time.Millisecond)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Record: %v, want an error about %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(samples) != tc.want {
				t.Fatalf("%d samples, want %d: %+v", len(samples), tc.want, samples)
			}
			for i, s := range samples {
				if s.RIP != 0xffffffff81000011+uint64(i) || s.CR3 != 0x1000*uint64(i+1) {
					t.Errorf("sample %d: rip %#x cr3 %#x", i, s.RIP, s.CR3)
				}
			}
		})
	}
}

// systemMap is a kernel's text at 0xffffffff81000000: three functions.
const systemMap = `ffffffff81000000 T _text
ffffffff81000100 T default_idle
ffffffff81000200 t clear_page_rep
ffffffff81000300 D some_data
ffffffff81000400 T memcpy
`

func TestOffset(t *testing.T) {
	k, err := ReadSystemMap(strings.NewReader(systemMap))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		offset uint64
		err    string
	}{
		{"not randomized", 0, ""},
		{"randomized by 40 MiB", 40 << 20, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var samples []Sample
			for i, a := range []uint64{0xffffffff81000105, 0xffffffff81000207, 0xffffffff81000402} {
				for range i + 1 {
					samples = append(samples, Sample{RIP: a + tc.offset})
				}
			}
			got, err := k.Offset(samples)
			if err != nil || got != tc.offset {
				t.Fatalf("Offset: %#x, %v; want %#x", got, err, tc.offset)
			}
			if name, off := k.lookup(samples[1].RIP - got); name != "clear_page_rep" || off != 7 {
				t.Errorf("lookup: %s+%#x, want clear_page_rep+0x7", name, off)
			}
		})
	}
	if _, err := k.Offset([]Sample{{RIP: 0x1000}}); err == nil {
		t.Error("Offset of samples without a kernel address: no error")
	}
}

func TestReadSystemMapErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, err string }{
		{"a short line", "ffffffff81000000 T\n", "line 1"},
		{"a bad address", "xyz T _text\n", "address \"xyz\""},
		{"no text", "ffffffff81000300 D some_data\n", "no text symbols"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadSystemMap(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadSystemMap: %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// selfSymbols reads this test binary's own function table.
func selfSymbols(t *testing.T) *GoSymbols {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ReadGoBinary(exe)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGoSymbols(t *testing.T) {
	g := selfSymbols(t)
	pc := reflect.ValueOf(TestOffset).Pointer()
	if got, want := g.lookup(uint64(pc)), runtime.FuncForPC(pc).Name(); got != want {
		t.Errorf("lookup(%#x) = %s, want %s", pc, got, want)
	}
	if _, err := ReadGoBinary(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ReadGoBinary of a missing file: no error")
	}
}

func TestAnalyze(t *testing.T) {
	k, err := ReadSystemMap(strings.NewReader(systemMap))
	if err != nil {
		t.Fatal(err)
	}
	g := selfSymbols(t)
	user := uint64(reflect.ValueOf(TestAnalyze).Pointer())
	idle, clear := uint64(0xffffffff81000105), uint64(0xffffffff81000207)
	samples := []Sample{
		{RIP: 0x7fe0_0000},                               // firmware
		{RIP: idle, CR3: 0x100}, {RIP: idle, CR3: 0x100}, // kernel boot
		{RIP: user, CR3: 0x200}, {RIP: clear, CR3: 0x200}, // init
		{RIP: user, CR3: 0x300}, {RIP: clear, CR3: 0x300}, {RIP: clear, CR3: 0x300}, // node
		{RIP: user, CR3: 0x200}, // init again
	}
	r, err := Analyze(samples, k, []Binary{{"init", g}, {"node", g}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Firmware != 1 || len(r.Boot) != 2 || len(r.Processes) != 2 {
		t.Fatalf("firmware %d, boot %d, processes %d; want 1, 2, 2", r.Firmware, len(r.Boot), len(r.Processes))
	}
	for i, want := range []struct {
		name    string
		samples int
	}{{"init", 3}, {"node", 3}} {
		if p := r.Processes[i]; p.Name != want.name || len(p.Samples) != want.samples {
			t.Errorf("process %d: %s with %d samples, want %s with %d", i, p.Name, len(p.Samples), want.name, want.samples)
		}
	}
	var out strings.Builder
	if err := r.Write(&out, 5); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== node (cr3 0x300): 3 samples, 2 in the kernel, 1 in its own code",
		"kernel           2  clear_page_rep", "guestprof.TestAnalyze"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}
