// Command mdlinks fails when README.md is longer than 300 lines or a relative
// link in README.md or docs/*.md does not resolve: to a file or directory
// that exists and, for a #anchor into a Markdown file, to one of its
// headings (GitHub's rule: lower case, spaces to '-', punctuation other than
// '-' and '_' removed). It prints each offending file:line.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

const maxReadmeLines = 300

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

func main() {
	files, _ := filepath.Glob("docs/*.md")
	files = append([]string{"README.md"}, files...)
	bad := 0
	if n := countLines("README.md"); n > maxReadmeLines {
		fmt.Fprintf(os.Stderr, "README.md: %d lines, more than %d\n", n, maxReadmeLines)
		bad++
	}
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		lines := readLines(f)
		fence := false
		for i, line := range lines {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
				continue
			}
			if fence {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(stripCode(line), -1) {
				if msg := check(f, m[1], anchors); msg != "" {
					fmt.Fprintf(os.Stderr, "%s:%d: %s: %s\n", f, i+1, m[1], msg)
					bad++
				}
			}
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}

// stripCode drops inline code spans, where brackets are not links.
func stripCode(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func check(from, link string, anchors map[string]map[string]bool) string {
	if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
		return ""
	}
	target, anchor, _ := strings.Cut(link, "#")
	path := from
	if target != "" {
		path = filepath.Join(filepath.Dir(from), target)
		if _, err := os.Stat(path); err != nil {
			return "no such file"
		}
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	a, ok := anchors[path]
	if !ok {
		a = headings(path)
		anchors[path] = a
	}
	if !a[anchor] {
		return "no such heading in " + path
	}
	return ""
}

func headings(path string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range readLines(path) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if fence || m == nil {
			continue
		}
		slug := slugify(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugify is GitHub's anchor for a heading.
func slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// readLines reads a Markdown file of this repository: the paths come from
// the repository's own links, checked by this program, not from its users.
func readLines(path string) []string {
	f, err := os.Open(path) //nolint:gosec // a path in this repository, see above
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func countLines(path string) int { return len(readLines(path)) }
