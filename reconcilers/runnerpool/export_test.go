package runnerpool

// PoolRunnerLabel is poolRunnerLabel for the suite: it tells one pool's
// registrations from those of a same-named pool of an earlier test.
var PoolRunnerLabel = poolRunnerLabel
