package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestRepositoryMap checks that the README's "The repository" table names
// every package of the module: by its path (`internal/space`), by a
// directory row that holds it (`proto/` for proto/nodepb), or, for
// internal packages, by its name in the row of the others.
func TestRepositoryMap(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	if _, rest, ok := strings.Cut(section, "\n## The repository\n"); ok {
		section, _, _ = strings.Cut(rest, "\n## ")
	} else {
		t.Fatal(`README.md has no "## The repository" section`)
	}
	var others string
	for line := range strings.SplitSeq(section, "\n") {
		if strings.HasPrefix(line, "| `internal/` (others)") {
			others = line
		}
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(out)) {
		pkg, err := filepath.Rel(root, dir)
		if err != nil || pkg == "." || pkg == "docs" {
			continue
		}
		if !mapped(section, others, pkg) {
			t.Errorf("the README's map of the repository does not name %s", pkg)
		}
	}
}

// mapped says whether section names the package at path pkg.
func mapped(section, others, pkg string) bool {
	if strings.Contains(section, "`"+pkg+"`") || strings.Contains(section, "`"+pkg+"/`") {
		return true
	}
	for parent := filepath.Dir(pkg); parent != "." && parent != "internal"; parent = filepath.Dir(parent) {
		if strings.Contains(section, "`"+parent+"/`") {
			return true
		}
	}
	name, ok := strings.CutPrefix(pkg, "internal/")
	return ok && strings.Contains(others, "`"+name+"`")
}
