package performer

// ForgetAdoptions drops what adoptLegacy remembers, as a restart of the
// operator does, so a suite can show what a new process finds.
func ForgetAdoptions(r *Reconciler) {
	r.adopted.Clear()
}
