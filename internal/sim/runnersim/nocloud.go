package runnersim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// NoCloudUserData reads the user-data file from a NoCloud seed ISO (volume
// cidata), as cloud-init's NoCloud datasource does in a Proxmox guest.
func NoCloudUserData(iso []byte) (string, error) {
	dir, err := os.MkdirTemp("", "runnersim-seed-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "seed.iso")
	if err := os.WriteFile(path, iso, 0o600); err != nil { //nolint:gosec // a path in our own temporary directory
		return "", err
	}
	b, err := file.OpenFromPath(path, true)
	if err != nil {
		return "", err
	}
	defer func() { _ = b.Close() }()
	fs, err := iso9660.Read(b, int64(len(iso)), 0, 2048)
	if err != nil {
		return "", fmt.Errorf("reading the NoCloud ISO: %w", err)
	}
	// The volume identifier is a fixed-width field, padded with NULs or spaces.
	if label := strings.TrimRight(fs.Label(), "\x00 "); label != "cidata" {
		return "", fmt.Errorf("the ISO's volume is %q; NoCloud looks for cidata", label)
	}
	f, err := fs.OpenFile("/user-data", os.O_RDONLY)
	if err != nil {
		return "", errors.Join(errors.New("the NoCloud ISO has no user-data"), err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	return string(data), nil
}
