package proxmoxsim

import (
	"crypto/sha1" //nolint:gosec // Proxmox's config digest is SHA-1
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// controlParams are request parameters of the config API that are not
// config keys.
var controlParams = map[string]bool{
	"node": true, "vmid": true, "delete": true, "digest": true, "skiplock": true,
	"revert": true, "force": true, "background_delay": true,
}

var (
	boolKeys = setOf("acpi", "autostart", "ciupgrade", "freeze", "keephugepages", "kvm", "localtime",
		"numa", "onboot", "protection", "reboot", "tablet", "template")
	intKeys = map[string]int64{ // key -> minimum
		"cores": 1, "sockets": 1, "vcpus": 1, "balloon": 0, "cpuunits": 1, "shares": 0, "migrate_speed": 0,
	}
	numberKeys = setOf("cpulimit", "migrate_downtime")
	// scalarKeys are the non-indexed qemu config keys of Proxmox VE 8.
	scalarKeys = setOf("acpi", "affinity", "agent", "amd-sev", "arch", "args", "audio0", "autostart",
		"balloon", "bios", "boot", "bootdisk", "cdrom", "cicustom", "cipassword", "citype", "ciupgrade",
		"ciuser", "cores", "cpu", "cpulimit", "cpuunits", "description", "efidisk0", "freeze", "hookscript",
		"hotplug", "hugepages", "ivshmem", "keephugepages", "keyboard", "kvm", "localtime", "lock", "machine",
		"memory", "meta", "migrate_downtime", "migrate_speed", "name", "nameserver", "numa", "onboot",
		"ostype", "protection", "reboot", "rng0", "scsihw", "searchdomain", "shares", "smbios1", "smp",
		"sockets", "spice_enhancements", "sshkeys", "startdate", "startup", "tablet", "tags", "tdf",
		"template", "tpmstate0", "vcpus", "vga", "vmgenid", "vmstatestorage", "watchdog")
	// indexedKeys are the prefixes of numbered keys and their highest index.
	indexedKeys = map[string]int{
		"ide": 3, "sata": 5, "scsi": 30, "virtio": 15, "net": 31, "ipconfig": 31, "unused": 255,
		"hostpci": 15, "usb": 14, "serial": 3, "parallel": 2, "numa": 7, "virtiofs": 9,
	}
)

func setOf(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

var indexedKeyRE = regexp.MustCompile(`^([a-z]+)(\d+)$`)

// indexedKeyOf returns the prefix of a numbered key ("net" for "net0").
func indexedKeyOf(key string) string {
	if m := indexedKeyRE.FindStringSubmatch(key); m != nil {
		return m[1]
	}
	return ""
}

// knownConfigKey reports whether Proxmox's qemu schema has key.
func knownConfigKey(key string) bool {
	if scalarKeys[key] {
		return true
	}
	m := indexedKeyRE.FindStringSubmatch(key)
	if m == nil {
		return false
	}
	maxIdx, ok := indexedKeys[m[1]]
	if !ok {
		return false
	}
	n, err := strconv.Atoi(m[2])
	return err == nil && n <= maxIdx && (m[2] == "0" || !strings.HasPrefix(m[2], "0"))
}

var (
	dnsNameRE = regexp.MustCompile(`^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*(?:[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)$`)
	tagRE     = regexp.MustCompile(`^(?i)[a-z0-9_][a-z0-9_\-+.]*$`)
	// Proxmox's "urlencoded" format: everything but unreserved characters percent-encoded.
	urlencodedRE = regexp.MustCompile(`^[-%a-zA-Z0-9_.!~*'()]*$`)
	intRE        = regexp.MustCompile(`^[-+]?\d+$`)
	numberRE     = regexp.MustCompile(`^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$`)
	sizeRE       = regexp.MustCompile(`^(\+?)(\d+(?:\.\d+)?)([KMGT]?)$`)
)

// validateConfig checks a config update the way Proxmox's schema does and
// returns the values to set (normalised) and the keys to delete.
func validateConfig(params map[string]string) (map[string]string, []string, *apiError) {
	set := map[string]string{}
	errs := map[string]string{}
	for k, v := range params {
		if controlParams[k] {
			continue
		}
		if !knownConfigKey(k) {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
			continue
		}
		nv, msg := validateConfigValue(k, v)
		if msg != "" {
			errs[k] = msg
			continue
		}
		if k == "cdrom" { // alias of ide2
			k = "ide2"
			if !strings.Contains(nv, "media=") {
				nv += ",media=cdrom"
			}
		}
		set[k] = nv
	}
	var del []string
	if d, ok := params["delete"]; ok {
		for _, k := range strings.FieldsFunc(d, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
			if !knownConfigKey(k) {
				errs["delete"] = fmt.Sprintf("invalid format - invalid configuration ID '%s'", k)
				continue
			}
			if _, both := set[k]; both {
				errs["delete"] = fmt.Sprintf("unable to delete '%s' - option is also set", k)
				continue
			}
			del = append(del, k)
		}
	}
	if len(errs) > 0 {
		return nil, nil, paramErrs(errs)
	}
	return set, del, nil
}

// validateConfigValue returns the normalised value, or an error message.
func validateConfigValue(k, v string) (string, string) {
	switch {
	case boolKeys[k]:
		switch strings.ToLower(v) {
		case "1", "true", "yes", "on":
			return "1", ""
		case "0", "false", "no", "off":
			return "0", ""
		}
		return "", fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
	case numberKeys[k]:
		if !numberRE.MatchString(v) {
			return "", fmt.Sprintf("type check ('number') failed - got '%s'", v)
		}
		return v, ""
	}
	if minV, ok := intKeys[k]; ok {
		if !intRE.MatchString(v) {
			return "", fmt.Sprintf("type check ('integer') failed - got '%s'", v)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		if n < minV {
			return "", fmt.Sprintf("value must have a minimum value of %d", minV)
		}
		return strconv.FormatInt(n, 10), ""
	}
	switch {
	case k == "memory":
		if intRE.MatchString(v) {
			n, _ := strconv.ParseInt(v, 10, 64)
			if n < 16 {
				return "", "value must have a minimum value of 16"
			}
			return strconv.FormatInt(n, 10), ""
		}
		for _, p := range strings.Split(v, ",") {
			key, val, ok := strings.Cut(p, "=")
			if !ok || key != "current" || !intRE.MatchString(val) {
				return "", "invalid format - format error\nmemory.current: type check ('integer') failed"
			}
		}
		return v, ""
	case k == "name":
		if !dnsNameRE.MatchString(v) {
			return "", "invalid format - value does not look like a valid DNS name"
		}
	case k == "tags":
		for _, t := range splitTags(v) {
			if !tagRE.MatchString(t) {
				return "", fmt.Sprintf("invalid format - invalid characters in tag '%s'", t)
			}
		}
		return joinTags([]string{v}), ""
	case k == "description":
		if len(v) > 8192 {
			return "", fmt.Sprintf("value may only be 8192 characters long (got %d)", len(v))
		}
		return trimDescription(v), ""
	case k == "sshkeys":
		if !urlencodedRE.MatchString(v) {
			return "", "invalid format - invalid urlencoded string: " + v
		}
		keys, err := url.PathUnescape(v)
		if err != nil {
			return "", "invalid format - invalid urlencoded string: " + v
		}
		for _, line := range strings.Split(keys, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if !validSSHKey(line) {
				return "", "SSH public key validation error"
			}
		}
	case k == "citype":
		switch v {
		case "configdrive2", "nocloud", "opennebula":
		default:
			return "", fmt.Sprintf("value '%s' does not have a value in the enumeration 'configdrive2, nocloud, opennebula'", v)
		}
	case k == "cicustom":
		for _, p := range strings.Split(v, ",") {
			key, val, ok := strings.Cut(p, "=")
			if !ok || val == "" || !setOf("user", "network", "meta", "vendor")[key] {
				return "", fmt.Sprintf("invalid format - format error\ncicustom: invalid option '%s'", p)
			}
			if !strings.Contains(val, ":") {
				return "", fmt.Sprintf("invalid format - format error\ncicustom.%s: invalid volume ID '%s'", key, val)
			}
		}
	case k == "nameserver":
		for _, a := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' || r == ';' }) {
			if net.ParseIP(a) == nil {
				return "", fmt.Sprintf("invalid format - value '%s' does not look like a valid address list", v)
			}
		}
	case indexedKeyOf(k) == "ipconfig":
		if msg := validateIPConfig(v); msg != "" {
			return "", msg
		}
	case indexedKeyOf(k) == "net":
		first, _, _ := strings.Cut(v, ",")
		model, _, _ := strings.Cut(first, "=")
		if !isNICModel(model) {
			return "", fmt.Sprintf("invalid format - format error\n%s.model: value '%s' does not have a value in the enumeration", k, model)
		}
	case k == "boot":
		if order, ok := strings.CutPrefix(v, "order="); ok {
			for _, dev := range strings.Split(order, ";") {
				if dev != "" && !knownConfigKey(dev) {
					return "", fmt.Sprintf("invalid format - format error\nboot.order: invalid boot device '%s'", dev)
				}
			}
		}
	case isDriveKey(k):
		d := parseDrive(v)
		if d.file == "" {
			return "", "invalid format - format error\nfile: property is missing and it is not optional"
		}
	}
	return v, ""
}

// validSSHKey checks an authorized_keys line roughly as "ssh-keygen -l"
// does for Proxmox: a known key type followed by a base64 blob that starts
// with the same type name in SSH wire format.
func validSSHKey(line string) bool {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		typ := f[i]
		if !strings.HasPrefix(typ, "ssh-") && !strings.HasPrefix(typ, "ecdsa-sha2-") && !strings.HasPrefix(typ, "sk-") {
			continue
		}
		blob, err := base64.StdEncoding.DecodeString(f[i+1])
		if err != nil || len(blob) < 4 {
			return false
		}
		n := int(binary.BigEndian.Uint32(blob))
		return n == len(typ) && len(blob) > 4+n && string(blob[4:4+n]) == typ
	}
	return false
}

func validateIPConfig(v string) string {
	for _, p := range strings.Split(v, ",") {
		key, val, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Sprintf("invalid format - format error\nipconfig: invalid option '%s'", p)
		}
		switch key {
		case "ip":
			if val == "dhcp" {
				continue
			}
			if ip, _, err := net.ParseCIDR(val); err != nil || ip.To4() == nil {
				return fmt.Sprintf("invalid format - format error\nip: invalid format - value does not look like a valid IPv4 network configuration (got '%s')", val)
			}
		case "gw":
			if ip := net.ParseIP(val); ip == nil || ip.To4() == nil {
				return fmt.Sprintf("invalid format - format error\ngw: invalid format - value does not look like a valid IPv4 address (got '%s')", val)
			}
		case "ip6":
			if val == "dhcp" || val == "auto" {
				continue
			}
			if _, _, err := net.ParseCIDR(val); err != nil {
				return fmt.Sprintf("invalid format - format error\nip6: invalid format (got '%s')", val)
			}
		case "gw6":
			if net.ParseIP(val) == nil {
				return fmt.Sprintf("invalid format - format error\ngw6: invalid format (got '%s')", val)
			}
		default:
			return fmt.Sprintf("invalid format - format error\nipconfig: invalid option '%s'", key)
		}
	}
	return ""
}

// typedValue gives a config value the JSON type Proxmox's API returns:
// numbers for integer, number and boolean keys, strings for everything else
// (including memory, a property string since PVE 8.1).
func typedValue(k, v string) any {
	if boolKeys[k] || numberKeys[k] {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			if f == float64(int64(f)) {
				return int64(f)
			}
			return f
		}
		return v
	}
	if _, ok := intKeys[k]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return v
}

// configJSON renders a VM config as GET .../config returns it.
func configJSON(cfg map[string]string) map[string]any {
	out := make(map[string]any, len(cfg)+1)
	for k, v := range cfg {
		out[k] = typedValue(k, v)
	}
	out["digest"] = configDigest(cfg)
	return out
}

// configDigest is the SHA-1 of the config, which clients may pass back as
// "digest" to detect concurrent changes.
func configDigest(cfg map[string]string) string {
	h := sha1.New() //nolint:gosec // matches Proxmox
	for _, k := range sortedKeys(cfg) {
		_, _ = io.WriteString(h, k+": "+cfg[k]+"\n")
	}
	return hex.EncodeToString(h.Sum(nil))
}
