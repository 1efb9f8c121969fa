package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// install downloads and unpacks the runner into InstallDir, unless the run
// script is already there (an image with the runner baked in).
func install(ctx context.Context, r Runner, log func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(r.InstallDir, r.RunScript)); err == nil {
		log("Runner already installed in %s", r.InstallDir)
		return nil
	}
	url := r.ExpandedDownloadURL()
	log("Downloading the actions runner %s (%s/%s) from %s", r.Version, r.OS, r.Arch, url)
	ctx, cancel := context.WithTimeout(ctx, r.DownloadTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("downloading the runner: %w", err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("downloading the runner from %s: HTTP %d", url, res.StatusCode)
	}
	tmp, err := os.CreateTemp("", "actions-runner-*.tar.gz")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, sum), res.Body); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("downloading the runner: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if want := strings.ToLower(r.SHA256); want != "" {
		if got := hex.EncodeToString(sum.Sum(nil)); got != want {
			return fmt.Errorf("the runner tarball's SHA-256 is %s, the configuration expects %s", got, want)
		}
	}
	if err := os.MkdirAll(r.InstallDir, 0o755); err != nil { //nolint:gosec // the runner dir is shared with the runner user
		return err
	}
	if err := untar(tmp.Name(), r.InstallDir); err != nil {
		return fmt.Errorf("unpacking the runner: %w", err)
	}
	log("Runner unpacked into %s", r.InstallDir)
	return nil
}

// untar unpacks a .tar.gz into dir, refusing entries that would land
// outside it.
func untar(path, dir string) error {
	f, err := os.Open(path) //nolint:gosec // our own temp file
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(root, filepath.Clean("/"+h.Name))
		if target != root && !strings.HasPrefix(target, root+string(filepath.Separator)) {
			return fmt.Errorf("entry %q escapes the install directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil { //nolint:gosec // runner tree
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil { //nolint:gosec // runner tree
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755) //nolint:gosec // modes from the runner tarball, capped
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, io.LimitReader(tr, 1<<30)); err != nil {
				_ = out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if filepath.IsAbs(h.Linkname) {
				return fmt.Errorf("symlink %q is absolute", h.Name)
			}
			link := filepath.Clean(filepath.Join(filepath.Dir(target), h.Linkname)) //nolint:gosec // checked to stay inside the install directory just below
			if !strings.HasPrefix(link, root+string(filepath.Separator)) {
				return fmt.Errorf("symlink %q points outside the install directory", h.Name)
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		}
	}
}
