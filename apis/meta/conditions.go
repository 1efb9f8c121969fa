package meta

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types shared by every kind. They follow kstatus: an object is
// Current when Ready=True and neither Reconciling nor Stalled is True;
// InProgress while Reconciling=True; Failed when Stalled=True.
const (
	// ReadyCondition says whether the object has reached its desired state.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the operator is working towards the
	// desired state and expects to get there without user action.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when the operator cannot make progress until a
	// user changes something; its message says what.
	StalledCondition = "Stalled"
)

// Reasons used by more than one kind. Kind-specific reasons live beside the kind.
const (
	// ProgressingReason: work is under way.
	ProgressingReason = "Progressing"
	// SucceededReason: the desired state is reached.
	SucceededReason = "Succeeded"
	// InvalidSpecReason: the spec cannot be acted on; the message names the field.
	InvalidSpecReason = "InvalidSpec"
	// DependencyNotReadyReason: a referenced object exists but is not Ready yet.
	DependencyNotReadyReason = "DependencyNotReady"
	// DependencyNotFoundReason: a referenced object does not exist.
	DependencyNotFoundReason = "DependencyNotFound"
	// SecretNotFoundReason: a referenced Secret, or a key in it, is missing.
	SecretNotFoundReason = "SecretNotFound"
	// DeletingReason: the object is being finalized.
	DeletingReason = "Deleting"
	// InvalidStoredSpecReason: the object as stored cannot be decoded (a
	// value an older or looser schema accepted); the message names each
	// field. Nothing is done for it until the field is fixed.
	InvalidStoredSpecReason = "InvalidStoredSpec"
)

// +kubebuilder:object:generate=false

// ConditionsAccessor is implemented by every HyperFleet kind, so shared status
// helpers can read and write conditions without knowing the concrete type.
type ConditionsAccessor interface {
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

// +kubebuilder:object:generate=false

// ObservedGenerationAccessor is implemented by every HyperFleet kind, so the
// shared finalize-status step stamps status.observedGeneration without
// knowing the concrete type.
type ObservedGenerationAccessor interface {
	GetObservedGeneration() int64
	SetObservedGeneration(int64)
}
