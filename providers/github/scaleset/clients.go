package scaleset

import (
	"sync"

	"github.com/actions/scaleset"
)

// Clients keeps one scale-set client per holder (a pool's namespace/name),
// made again when the holder's credentials or scope change. A client holds
// the admin token its registration-token exchange got, refreshed as it
// expires, so a pool's reconciles and its listener share one, and one
// exchange serves them all.
type Clients struct {
	mu sync.Mutex
	m  map[string]heldClient
}

type heldClient struct {
	key    string
	client *scaleset.Client
}

// Get returns holder's client for cfg, building it when holder has none or
// had one for other credentials or another scope.
func (c *Clients) Get(holder string, cfg ClientConfig) (*scaleset.Client, error) {
	key := cfg.Credentials.Fingerprint() + "\n" + cfg.ConfigURL
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[holder]; ok && h.key == key {
		return h.client, nil
	}
	client, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]heldClient{}
	}
	c.m[holder] = heldClient{key: key, client: client}
	return client, nil
}

// Forget drops holder's client.
func (c *Clients) Forget(holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, holder)
}
