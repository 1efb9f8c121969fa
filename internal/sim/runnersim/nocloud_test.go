package runnersim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// An ISO made as the Proxmox provider makes its NoCloud seed (volume
// cidata, Rock Ridge and Joliet) gives back its user-data.
func TestNoCloudUserDataReadsTheSeed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seed.iso")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	b, err := file.OpenFromPath(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := iso9660.Create(b, 0, 0, 2048, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"user-data": "#cloud-config\nruncmd: []\n", "meta-data": "instance-id: x\n"} {
		rw, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := rw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: "cidata"}); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := NoCloudUserData(data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ud, "#cloud-config\nruncmd: []") {
		t.Errorf("user-data %q", ud)
	}
	if _, err := NoCloudUserData(data[:4096]); err == nil {
		t.Error("a truncated ISO was read without an error")
	}
}
