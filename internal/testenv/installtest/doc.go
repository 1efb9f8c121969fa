// Package installtest runs HyperFleet's installation pages as tests: it
// reads a page's marked command blocks (```sh step=<tag>) and holds an
// installation on the test cluster — objects applied server-side as the
// GitOps tools and Helm apply them, and the operator running in the test's
// process as the installed Deployment would run it. internal/installdoc
// follows docs/install.md with it, internal/uninstall docs/uninstall.md.
package installtest

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Doc is a page's command blocks, by their step= tag, one command a line
// (comments dropped, continuation lines joined), and the tags in the page's
// order.
type Doc struct {
	Page   string
	Blocks map[string][]string
	Order  []string
}

// ReadDoc reads page (relative to root).
func ReadDoc(t *testing.T, root, page string) Doc {
	t.Helper()
	f, err := os.Open(filepath.Join(root, page)) //nolint:gosec // a page of the repository, named by the test
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	d := Doc{Page: page, Blocks: map[string][]string{}}
	var step, cont string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```sh step="):
			step = strings.TrimPrefix(line, "```sh step=")
			if _, dup := d.Blocks[step]; dup {
				t.Fatalf("%s: step %s twice", page, step)
			}
			d.Blocks[step] = nil
			d.Order = append(d.Order, step)
			continue
		case line == "```":
			step = ""
			continue
		case step == "":
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`)
			continue
		}
		d.Blocks[step] = append(d.Blocks[step], cont+line)
		cont = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// Path is the steps of one path (their tags begin with prefix) in the
// page's order, which must hold want: the test runs them as the page lists
// them, so a page that moved a step runs moved.
func (d Doc) Path(t *testing.T, prefix string, want ...string) []string {
	t.Helper()
	var out []string
	for _, s := range d.Order {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	got := slices.Clone(out)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s has the steps %v, the test knows %v", d.Page, out, want)
	}
	return out
}

// Lines is step's commands; a step the page lacks, or one without a
// command, fails the test.
func (d Doc) Lines(t *testing.T, step string) []string {
	t.Helper()
	if len(d.Blocks[step]) == 0 {
		t.Fatalf("%s has no commands for step %s", d.Page, step)
	}
	return d.Blocks[step]
}
