package gitops

// FinalizerPolicyDir is the component of the MachineClaim finalizer
// MutatingAdmissionPolicy (Kubernetes 1.36).
const FinalizerPolicyDir = "kustomize/components/machineclaim-finalizer"

// FinalizerPolicyAPI is what a cluster serves when it can run the finalizer
// policy, in the form of Helm's .Capabilities.APIVersions.Has.
const FinalizerPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// optionalParts are the components the chart carries behind a value: each
// object a component adds to the base becomes a template under folder,
// rendered when condition holds.
var optionalParts = []struct{ dir, folder, condition string }{
	{MonitoringDir, "monitoring", ".Values.monitoring.enabled"},
	{FinalizerPolicyDir, "admission", `and .Values.machineClaimFinalizerPolicy.enabled (.Capabilities.APIVersions.Has "` + FinalizerPolicyAPI + `")`},
}
