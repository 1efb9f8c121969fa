package machineclaim

// AddressGrace is addressGrace, for the tests that step the claims' clock
// past it.
const AddressGrace = addressGrace
