package meta

// LocalObjectReference names an object in the same namespace as the referrer.
type LocalObjectReference struct {
	// Name of the referenced object, in the referrer's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SecretKeyReference selects one key of a Secret in the referrer's namespace.
type SecretKeyReference struct {
	// Name of the Secret, in the referrer's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key inside the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// ConfigSourceKind says whether a reference points at a Secret or a ConfigMap.
// +kubebuilder:validation:Enum=Secret;ConfigMap
type ConfigSourceKind string

const (
	SecretKind    ConfigSourceKind = "Secret"
	ConfigMapKind ConfigSourceKind = "ConfigMap"
)

// KeyReference selects one key of a Secret or ConfigMap in the referrer's namespace.
type KeyReference struct {
	// Kind of the object holding the key.
	// +kubebuilder:default=Secret
	// +optional
	Kind ConfigSourceKind `json:"kind,omitempty"`
	// Name of the Secret or ConfigMap, in the referrer's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key inside the object's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// CredentialsLabel must be on every Secret the operator reads (credentials,
// CA bundles, webhook secrets). The operator's Secret cache selects on it, so
// it never lists or watches the other Secrets of the cluster.
const CredentialsLabel = "hyperfleet.io/credentials"

// ForClaimLabel is on every Secret the operator makes for one machine (a
// runner's bootstrap Secret), naming that machine's MachineClaim: only that
// claim may name the Secret in its spec.
const ForClaimLabel = "hyperfleet.io/for-claim"

// ManagedByLabel, set to ManagedByValue, is on every Pod, Service,
// Deployment and ConfigMap the operator makes. The operator's cache selects
// those kinds on it, so it never lists or watches the other Pods and
// ConfigMaps of the cluster; anything it did not make (a template or CA
// bundle ConfigMap) is read past the cache.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "hyperfleet"
)
