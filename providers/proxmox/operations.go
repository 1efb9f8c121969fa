package proxmox

import (
	"net/http"
	"regexp"
	"strings"
)

// operations maps API paths (after /api2/json) to metric operation names.
// The first match wins; IDs never reach a label.
var operations = []struct {
	pattern *regexp.Regexp
	name    string
}{
	{regexp.MustCompile(`^/version$`), "version"},
	{regexp.MustCompile(`^/access/ticket$`), "login"},
	{regexp.MustCompile(`^/cluster/resources$`), "cluster_resources"},
	{regexp.MustCompile(`^/cluster/nextid$`), "nextid"},
	{regexp.MustCompile(`^/cluster/status$`), "cluster_status"},
	{regexp.MustCompile(`^/cluster/tasks$`), "cluster_tasks"},
	{regexp.MustCompile(`^/nodes$`), "nodes"},
	{regexp.MustCompile(`^/nodes/[^/]+/status$`), "node_status"},
	{regexp.MustCompile(`^/nodes/[^/]+/tasks/[^/]+/status$`), "task_status"},
	{regexp.MustCompile(`^/nodes/[^/]+/storage/[^/]+/upload$`), "storage_upload"},
	{regexp.MustCompile(`^/nodes/[^/]+/storage/[^/]+/content/.+$`), "storage_content"},
	{regexp.MustCompile(`^/nodes/[^/]+/storage`), "storage"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+/clone$`), "vm_clone"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+/resize$`), "vm_resize"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+/config$`), "vm_config"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+/status/current$`), "vm_status"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+/status/(start|stop|shutdown)$`), "vm_power"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+/agent/`), "vm_agent"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu/\d+$`), "vm"},
	{regexp.MustCompile(`^/nodes/[^/]+/qemu$`), "vm_list"},
}

func operation(r *http.Request) string {
	path := r.URL.Path
	if i := strings.Index(path, "/api2/json"); i >= 0 {
		path = path[i+len("/api2/json"):]
	}
	for _, op := range operations {
		if op.pattern.MatchString(path) {
			if op.name == "vm" && r.Method == http.MethodDelete {
				return "vm_delete"
			}
			return op.name
		}
	}
	return "other"
}
