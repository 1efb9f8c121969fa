// Package percentile is the benchmarks' one way to read latencies: the
// nearest-rank percentile, and milliseconds for b.ReportMetric.
package percentile

import (
	"slices"
	"time"
)

// Of is the p-th percentile (nearest rank) of ds; 0 when empty.
func Of(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max((p*len(s)+99)/100-1, 0)
	return s[min(i, len(s)-1)]
}

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
