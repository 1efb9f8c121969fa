// Package samples embeds the sample manifests, so `hyperfleet-dev` and the
// tests apply exactly the files users read.
package samples

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed *.yaml
var files embed.FS

// Files returns the sample file names in apply order (file names sort by it)
// and their contents.
func Files() (map[string][]byte, []string, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	out := make(map[string][]byte, len(names))
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, nil, err
		}
		out[name] = data
	}
	return out, names, nil
}
