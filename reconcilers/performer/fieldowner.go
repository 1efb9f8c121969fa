package performer

// FieldOwner is the server-side-apply field manager of what this reconciler makes.
const FieldOwner = "hyperfleet-performer"
