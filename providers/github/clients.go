package github

import "sync"

// Clients keeps one Client per set of credentials for many holders (runner
// pools): holders whose Configs have the same Fingerprint share a Client,
// and a Client no holder uses any more is closed and dropped. When a
// holder's Secret changes, its next Get returns a Client built from the new
// credentials; nothing needs restarting. It is safe for concurrent use.
type Clients struct {
	mu      sync.Mutex
	holders map[string]string // holder → fingerprint
	clients map[string]*sharedClient
}

type sharedClient struct {
	client *Client
	users  int
}

// NewClients returns an empty cache.
func NewClients() *Clients {
	return &Clients{holders: map[string]string{}, clients: map[string]*sharedClient{}}
}

// Get returns the Client for cfg on behalf of holder (e.g. a pool's
// namespace/name), building it when no holder has these credentials yet.
func (c *Clients) Get(holder string, cfg Config) (*Client, error) {
	fp := cfg.Fingerprint()
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.holders[holder]; ok && prev == fp {
		return c.clients[fp].client, nil
	}
	sc, ok := c.clients[fp]
	if !ok {
		client, err := New(cfg)
		if err != nil {
			return nil, err
		}
		sc = &sharedClient{client: client}
		c.clients[fp] = sc
	}
	c.releaseLocked(holder)
	c.holders[holder] = fp
	sc.users++
	return sc.client, nil
}

// Forget drops holder (a deleted pool); its Client is closed when no other
// holder uses it.
func (c *Clients) Forget(holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(holder)
}

// Len reports how many distinct Clients are cached.
func (c *Clients) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.clients)
}

func (c *Clients) releaseLocked(holder string) {
	fp, ok := c.holders[holder]
	if !ok {
		return
	}
	delete(c.holders, holder)
	if sc := c.clients[fp]; sc != nil {
		sc.users--
		if sc.users <= 0 {
			sc.client.Close()
			delete(c.clients, fp)
		}
	}
}
