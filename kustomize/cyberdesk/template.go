// Package cyberdesk embeds the default Cyberdesk VirtualMachine template
// ConfigMap, so the sandbox and the tests use the file the base ships.
package cyberdesk

import (
	_ "embed"
)

// VMTemplateConfigMap is the cyberdesk-vm-template ConfigMap manifest.
//
//go:embed vm-template.yaml
var VMTemplateConfigMap []byte
