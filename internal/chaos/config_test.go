package chaos

import (
	"fmt"
	"strconv"
	"time"
)

// config is one run's knobs. Those a person may want to change come from
// the environment (CHAOS_*), so `make chaos` needs no flags.
type config struct {
	// seed drives every random choice: which phase each kill aims at, the
	// pauses, the faults and the claims' lifetimes. CHAOS_SEED repeats a
	// run's choices (the timing of two processes on a shared machine never
	// repeats exactly, so neither does every interleaving).
	seed int64
	// kills is how many times the leader is killed (CHAOS_KILLS).
	kills int
	// faultsPerMinute is how many faults are injected into the simulators
	// (CHAOS_FAULTS_PER_MINUTE); 0 turns injection off.
	faultsPerMinute int
	// proxmoxSlots and kubevirtSlots are how many claims live at once on
	// each cluster; each slot creates and deletes claims in turn.
	proxmoxSlots, kubevirtSlots int

	// The operator's leader election: short, so a failover takes seconds;
	// not so short that a loaded 2-core machine makes the leader miss its
	// renewals.
	leaseDuration, renewDeadline, retryPeriod time.Duration
	// orphanGrace and sweepInterval: the sweeper's, short so the final
	// check waits seconds, not the production ten minutes.
	orphanGrace, sweepInterval time.Duration
}

func defaultConfig() config {
	return config{
		seed:            time.Now().UnixNano(),
		kills:           50,
		faultsPerMinute: 30,
		proxmoxSlots:    6,
		kubevirtSlots:   4,
		leaseDuration:   5 * time.Second,
		renewDeadline:   4 * time.Second,
		retryPeriod:     time.Second,
		orphanGrace:     20 * time.Second,
		sweepInterval:   5 * time.Second,
	}
}

// configFromEnv is defaultConfig with CHAOS_SEED, CHAOS_KILLS and
// CHAOS_FAULTS_PER_MINUTE applied; a value that does not parse is refused,
// naming the variable, rather than silently replaced by the default.
func configFromEnv(getenv func(string) string) (config, error) {
	c := defaultConfig()
	for _, v := range []struct {
		name string
		min  int64
		set  func(int64)
	}{
		{"CHAOS_SEED", -1 << 62, func(n int64) { c.seed = n }},
		{"CHAOS_KILLS", 1, func(n int64) { c.kills = int(n) }},
		{"CHAOS_FAULTS_PER_MINUTE", 0, func(n int64) { c.faultsPerMinute = int(n) }},
	} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < v.min {
			return c, fmt.Errorf("%s=%q: want an integer ≥ %d", v.name, s, v.min)
		}
		v.set(n)
	}
	return c, nil
}
