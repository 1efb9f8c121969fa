package proxmoxsim

import (
	"bytes"
	"crypto/md5" //nolint:gosec // Proxmox offers md5 checksums for uploads
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // Proxmox offers sha1 checksums for uploads
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// storageBase is where a file-based storage keeps its files.
func storageBase(si *storageInst) string {
	if si.cfg.Name == "local" {
		return "/var/lib/vz"
	}
	return "/mnt/pve/" + si.cfg.Name
}

func contentDir(content string) string {
	switch content {
	case "iso":
		return "template/iso"
	case "vztmpl":
		return "template/cache"
	case "backup":
		return "dump"
	}
	return content // snippets, import
}

// volumePath is the path Proxmox reports for a volume.
func volumePath(si *storageInst, volname string) string {
	content, file, _ := strings.Cut(volname, "/")
	if isFileStorage(si.cfg.Type) {
		switch content {
		case "iso", "vztmpl", "backup", "snippets", "import":
			return storageBase(si) + "/" + contentDir(content) + "/" + file
		}
		return storageBase(si) + "/images/" + volname
	}
	switch si.cfg.Type {
	case "rbd":
		return "rbd:" + si.cfg.Name + "/" + volname
	case "zfspool":
		return "/dev/zvol/rpool/data/" + volname
	}
	return "/dev/pve/" + path.Base(volname)
}

// volumeOwner extracts the owning VMID from an image volume name.
var ownerRE = regexp.MustCompile(`(?:^|/)(?:vm|base)-(\d+)-(?:disk-\d+|cloudinit)[^/]*$`)

func volumeOwner(vol string) int {
	m := ownerRE.FindStringSubmatch(vol)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

type imageVol struct {
	volid   string
	volname string
	vmid    int
	size    int64
	format  string
	parent  string
}

// images lists the VM disk volumes on a storage instance.
func (s *Server) images(si *storageInst) []imageVol {
	var out []imageVol
	for _, id := range sortedVMIDs(s.vms) {
		vm := s.vms[id]
		if si.node != "" && vm.node != si.node {
			continue
		}
		for _, k := range sortedKeys(vm.config) {
			if !isDriveKey(k) {
				continue
			}
			d := parseDrive(vm.config[k])
			if d.storageID() != si.cfg.Name || (d.isCDROM() && !d.isCloudInit()) {
				continue
			}
			_, vol, _ := strings.Cut(d.file, ":")
			iv := imageVol{volid: d.file, volname: vol, vmid: volumeOwner(vol), size: d.size(), format: "raw"}
			if d.isCloudInit() {
				iv.size = 4 << 20
			}
			if ext := fileExt(vol); ext == ".qcow2" || ext == ".vmdk" {
				iv.format = strings.TrimPrefix(ext, ".")
			}
			if parent, _, ok := strings.Cut(vol, "/"); ok && strings.HasPrefix(parent, "base-") {
				iv.parent = parent
			}
			out = append(out, iv)
		}
	}
	return out
}

func (s *Server) handleStorageList(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node := rc.vars["node"]
	content := rc.params["content"]
	only := rc.params["storage"]
	out := []map[string]any{}
	for _, si := range s.nodeStorages(node) {
		if only != "" && si.cfg.Name != only {
			continue
		}
		if content != "" {
			match := false
			for _, c := range strings.Split(content, ",") {
				if si.cfg.hasContent(c) {
					match = true
				}
			}
			if !match {
				continue
			}
		}
		out = append(out, s.storageJSON(si))
	}
	return out, nil
}

func (s *Server) storageVar(rc *reqCtx) (*storageInst, *apiError) {
	name := rc.vars["storage"]
	si := s.storage(rc.vars["node"], name)
	if si == nil {
		for _, st := range s.opts.Storages {
			if st.Name == name {
				return nil, failf("storage '%s' is not available on node '%s'", name, rc.vars["node"])
			}
		}
		return nil, failf("storage '%s' does not exist", name)
	}
	return si, nil
}

func (s *Server) handleStorageStatus(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, aerr := s.storageVar(rc)
	if aerr != nil {
		return nil, aerr
	}
	return s.storageJSON(si), nil
}

func (s *Server) handleStorageContent(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, aerr := s.storageVar(rc)
	if aerr != nil {
		return nil, aerr
	}
	content := rc.params["content"]
	vmidFilter, _ := strconv.Atoi(rc.params["vmid"])
	out := []map[string]any{}
	for _, k := range sortedKeys(fileNames(si)) {
		f := si.files[k]
		if content != "" && f.content != content {
			continue
		}
		if vmidFilter != 0 {
			continue
		}
		row := map[string]any{
			"volid": si.cfg.Name + ":" + f.volname, "content": f.content, "format": f.format,
			"size": f.size, "ctime": f.ctime,
		}
		if f.notes != "" {
			row["notes"] = f.notes
		}
		out = append(out, row)
	}
	if content == "" || content == "images" {
		for _, iv := range s.images(si) {
			if vmidFilter != 0 && iv.vmid != vmidFilter {
				continue
			}
			row := map[string]any{
				"volid": iv.volid, "content": "images", "format": iv.format, "size": iv.size,
				"vmid": iv.vmid, "ctime": 1700000000,
			}
			if iv.parent != "" {
				row["parent"] = iv.parent
			}
			if isFileStorage(si.cfg.Type) {
				row["used"] = iv.size / 10
			}
			out = append(out, row)
		}
	}
	return out, nil
}

func fileNames(si *storageInst) map[string]string {
	m := make(map[string]string, len(si.files))
	for k := range si.files {
		m[k] = k
	}
	return m
}

// volname strips an optional "storage:" prefix from a volume parameter.
func volname(si *storageInst, volume string) (string, *apiError) {
	if sid, vol, ok := strings.Cut(volume, ":"); ok {
		if sid != si.cfg.Name {
			return "", failf("volume '%s' does not belong to storage '%s'", volume, si.cfg.Name)
		}
		return vol, nil
	}
	return volume, nil
}

func (s *Server) handleVolumeGet(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, aerr := s.storageVar(rc)
	if aerr != nil {
		return nil, aerr
	}
	vol, aerr := volname(si, rc.vars["volume"])
	if aerr != nil {
		return nil, aerr
	}
	if f, ok := si.files[vol]; ok {
		m := map[string]any{"path": volumePath(si, vol), "size": f.size, "used": f.size, "format": f.format}
		if f.notes != "" {
			m["notes"] = f.notes
		}
		return m, nil
	}
	for _, iv := range s.images(si) {
		if iv.volname == vol {
			used := iv.size
			if !isFileStorage(si.cfg.Type) {
				used = 0
			}
			return map[string]any{"path": volumePath(si, vol), "size": iv.size, "used": used, "format": iv.format}, nil
		}
	}
	return nil, failf("no such volume '%s:%s'", si.cfg.Name, vol)
}

func (s *Server) handleVolumeDelete(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, aerr := s.storageVar(rc)
	if aerr != nil {
		return nil, aerr
	}
	vol, aerr := volname(si, rc.vars["volume"])
	if aerr != nil {
		return nil, aerr
	}
	for _, iv := range s.images(si) {
		if iv.volname == vol {
			return nil, failf("unable to delete volume '%s' - still in use by VM %d", iv.volid, iv.vmid)
		}
	}
	t := s.newTask(rc.vars["node"], "imgdel", si.cfg.Name, rc.user)
	volid := si.cfg.Name + ":" + vol
	s.runTask(t, s.lat.Upload, rc.taskFault, func(injected string) string {
		if injected != "" {
			return injected
		}
		if _, ok := si.files[vol]; !ok {
			return fmt.Sprintf("unable to delete '%s' - %s: No such file or directory", volid, volumePath(si, vol))
		}
		delete(si.files, vol)
		t.logf("Removed volume '%s'", volid)
		return ""
	})
	return t.upid, nil
}

var (
	isoExtRE    = regexp.MustCompile(`(?i)[^/]+\.(?:iso|img)$`)
	vztmplExtRE = regexp.MustCompile(`[^/]+\.tar\.(?:gz|xz|zst|bz2)$`)
	importExtRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+\.(?:ova|ovf|qcow2|raw|vmdk)$`)
	unsafeRE    = regexp.MustCompile(`[^A-Za-z0-9_.+-]`)
)

func newHash(algo string) hash.Hash {
	switch algo {
	case "md5":
		return md5.New() //nolint:gosec // offered by Proxmox
	case "sha1":
		return sha1.New() //nolint:gosec // offered by Proxmox
	case "sha224":
		return sha256.New224()
	case "sha256":
		return sha256.New()
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return nil
}

var hashAlgos = []string{"md5", "sha1", "sha224", "sha256", "sha384", "sha512"}

// handleUpload implements POST .../upload (multipart): only iso, vztmpl and
// import content may be uploaded, to file-based storages, as in Proxmox.
// The data is hashed and counted, and kept only when small (a cloud-init
// seed), for the guest to read at boot (SeedAtBoot).
func (s *Server) handleUpload(rc *reqCtx) (any, *apiError) {
	mr, err := rc.r.MultipartReader()
	if err != nil {
		return nil, paramErr("filename", "property is missing and it is not optional")
	}
	fields := map[string]string{}
	for k, v := range rc.r.URL.Query() {
		if len(v) > 0 {
			fields[k] = v[len(v)-1]
		}
	}
	var (
		fname   string
		size    int64
		hashes  = map[string]hash.Hash{}
		gotFile bool
		kept    limitedBuffer
	)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errf(http.StatusBadRequest, "error reading upload: %v", err)
		}
		if part.FileName() != "" {
			gotFile = true
			fname = part.FileName()
			algos := hashAlgos
			if a := fields["checksum-algorithm"]; newHash(a) != nil {
				algos = []string{a}
			}
			writers := make([]io.Writer, 0, len(algos))
			for _, a := range algos {
				h := newHash(a)
				hashes[a] = h
				writers = append(writers, h)
			}
			n, err := io.Copy(io.MultiWriter(append(writers, &kept)...), part)
			if err != nil {
				return nil, errf(http.StatusBadRequest, "error reading upload: %v", err)
			}
			size = n
			continue
		}
		b, err := io.ReadAll(io.LimitReader(part, 64<<10))
		if err != nil {
			return nil, errf(http.StatusBadRequest, "error reading upload: %v", err)
		}
		fields[part.FormName()] = string(b)
	}
	content := fields["content"]
	switch content {
	case "":
		return nil, paramErr("content", "property is missing and it is not optional")
	case "iso", "vztmpl", "import":
	default:
		return nil, paramErr("content", fmt.Sprintf("value '%s' does not have a value in the enumeration 'iso, vztmpl, import'", content))
	}
	if fname == "" {
		fname = fields["filename"]
	}
	if !gotFile || fname == "" {
		return nil, paramErr("filename", "property is missing and it is not optional")
	}
	checksum, algo := fields["checksum"], fields["checksum-algorithm"]
	if checksum != "" && algo == "" {
		return nil, paramErr("checksum-algorithm", "missing property - 'checksum' requires this property")
	}
	if algo != "" {
		if newHash(algo) == nil {
			return nil, paramErr("checksum-algorithm", fmt.Sprintf("value '%s' does not have a value in the enumeration 'md5, sha1, sha224, sha256, sha384, sha512'", algo))
		}
		if checksum == "" {
			return nil, paramErr("checksum", "missing property - 'checksum-algorithm' requires this property")
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	si, aerr := s.storageVar(rc)
	if aerr != nil {
		return nil, aerr
	}
	if !isFileStorage(si.cfg.Type) {
		return nil, failf("can't upload to storage type '%s'", si.cfg.Type)
	}
	filename := unsafeRE.ReplaceAllString(path.Base(fname), "_")
	switch content {
	case "iso":
		if !isoExtRE.MatchString(filename) {
			return nil, paramErr("filename", "wrong file extension")
		}
	case "vztmpl":
		if !vztmplExtRE.MatchString(filename) {
			return nil, paramErr("filename", "wrong file extension")
		}
	case "import":
		if !importExtRE.MatchString(filename) {
			return nil, paramErr("filename", "invalid filename or wrong extension")
		}
	}
	if !si.cfg.hasContent(content) {
		return nil, failf("storage '%s' does not support '%s' content", si.cfg.Name, content)
	}
	node := rc.vars["node"]
	var tmp [8]byte
	_, _ = rand.Read(tmp[:])
	tmpName := "/var/tmp/pveupload-" + hex.EncodeToString(tmp[:])
	dest := volumePath(si, content+"/"+filename)
	t := s.newTask(node, "imgcopy", "", rc.user)
	t.logf("starting file import from: %s", tmpName)
	var got string
	if algo != "" {
		got = hex.EncodeToString(hashes[algo].Sum(nil))
	}
	s.runTask(t, s.lat.Upload, rc.taskFault, func(injected string) string {
		if injected != "" {
			return injected
		}
		if algo != "" {
			t.logf("calculating checksum...")
			if !strings.EqualFold(got, checksum) {
				return fmt.Sprintf("checksum mismatch: got '%s' != expect '%s'", got, checksum)
			}
			t.logf("OK, checksum verified")
		}
		t.logf("target node: %s", node)
		t.logf("target file: %s", dest)
		t.logf("file size is: %d", size)
		t.logf("command: cp -- %s %s", tmpName, dest)
		f := si.addFile(content, filename, size)
		if content == "iso" && !kept.over {
			f.data = kept.buf.Bytes()
		}
		t.logf("finished file import successfully")
		return ""
	})
	return t.upid, nil
}

// limitedBuffer keeps what is written to it up to maxKeptUpload bytes, and
// says when there was more.
type limitedBuffer struct {
	buf  bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if !b.over && b.buf.Len()+len(p) <= maxKeptUpload {
		b.buf.Write(p)
	} else {
		b.over = true
		b.buf.Reset()
	}
	return len(p), nil
}
