package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// RegistrationMethod is how a runner gets its GitHub credentials.
// +kubebuilder:validation:Enum=RegistrationToken;JITConfig
type RegistrationMethod string

const (
	// RegistrationToken: a registration token fetched for this one runner
	// (never shared with another); the agent runs config.sh --ephemeral.
	RegistrationToken RegistrationMethod = "RegistrationToken"
	// JITConfig: a just-in-time runner config, single-use and bound to one
	// runner; no config.sh step. The default.
	JITConfig RegistrationMethod = "JITConfig"
)

// RunnerPoolSpec keeps a number of ephemeral GitHub Actions runners, each on
// its own machine.
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="spec.minReplicas must be less than or equal to spec.maxReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || (self.replicas >= self.minReplicas && self.replicas <= self.maxReplicas)",message="spec.replicas must be between spec.minReplicas and spec.maxReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.github.scaleSet) || !has(self.registrationMethod) || self.registrationMethod == 'JITConfig'",message="spec.registrationMethod must be JITConfig with spec.github.scaleSet: a scale set's runners register only with the just-in-time configs GitHub generates for it"
// +kubebuilder:validation:XValidation:rule="!has(self.github.scaleSet) || !has(self.webhookScaling)",message="spec.webhookScaling cannot be set with spec.github.scaleSet: a scale-set pool scales on the count GitHub's scale-set API states, never on webhook deliveries or the job poll; remove one of the two"
type RunnerPoolSpec struct {
	// TemplateRef names the HypervisorMachineTemplate, in this namespace,
	// each runner's machine is cloned from; its workload should be github-runner.
	// +required
	TemplateRef meta.LocalObjectReference `json:"templateRef"`

	// GitHub says where the runners register.
	// +required
	GitHub GitHubRunnerScope `json:"github"`

	// Labels runners register with (besides self-hosted and the OS/arch
	// labels); a queued job goes to the pool whose labels cover all of its own.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[^,\s]+$`
	// +listType=set
	// +optional
	Labels []string `json:"labels,omitempty"`

	// RunnerGroup the runners join (organization runners only).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RunnerGroup string `json:"runnerGroup,omitempty"`

	// RegistrationMethod is how each runner gets its GitHub credential:
	// JITConfig (the default), a just-in-time config bound to that one
	// runner and good for one connection; or RegistrationToken, a token
	// fetched for that one runner, which could register further runners
	// until it expires (an hour), so it is the weaker choice.
	// +kubebuilder:default=JITConfig
	// +optional
	RegistrationMethod RegistrationMethod `json:"registrationMethod,omitempty"`

	// MinReplicas is the number of runners kept even when idle.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:default=0
	// +optional
	MinReplicas int32 `json:"minReplicas"`

	// MaxReplicas caps the runners, busy and idle together.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:default=10
	// +optional
	MaxReplicas int32 `json:"maxReplicas"`

	// Replicas is a floor set by hand or with kubectl scale; queued jobs
	// can raise the pool above it, up to maxReplicas. Unset: minReplicas.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// IdleTTL is how long a runner above the floor may sit idle before it is
	// removed. Between 0s (removed at once) and 168h (7 days).
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('0s') && duration(self) <= duration('168h'))",message="spec.idleTTL must be a duration between 0s and 168h (7 days), e.g. 10m"
	// +optional
	IdleTTL *metav1.Duration `json:"idleTTL,omitempty"`

	// MaxLifetime retires a runner (once idle) this long after its machine
	// was claimed. Between 1m and 8760h (365 days): a shorter life retires
	// runners before they can register.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1m') && duration(self) <= duration('8760h'))",message="spec.maxLifetime must be a duration between 1m and 8760h (365 days), e.g. 24h"
	// +optional
	MaxLifetime *metav1.Duration `json:"maxLifetime,omitempty"`

	// RegistrationTimeout is how long a new runner may take to come online in
	// GitHub before its registration is removed and its machine deleted.
	// Between 30s and 24h: a machine needs at least that long to boot and
	// register, and 0s would delete every starting runner on the next
	// reconcile.
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('30s') && duration(self) <= duration('24h'))",message="spec.registrationTimeout must be a duration between 30s and 24h, e.g. 15m"
	// +optional
	RegistrationTimeout *metav1.Duration `json:"registrationTimeout,omitempty"`

	// WebhookScaling scales up on workflow_job webhook deliveries.
	// +optional
	WebhookScaling *WebhookScaling `json:"webhookScaling,omitempty"`
}

// GitHubRunnerScope is a repository, or an organization, plus credentials.
// +kubebuilder:validation:XValidation:rule="!has(self.repository) || has(self.owner)",message="spec.github.repository requires spec.github.owner"
// +kubebuilder:validation:XValidation:rule="has(self.repository) || has(self.organization)",message="spec.github needs owner and repository, or organization"
// Adding or removing a scope field switches the pool's scope as surely as
// changing it, so these rules sit on the parent: a rule on the field itself
// only runs when both the old and the new object have it.
// +kubebuilder:validation:XValidation:rule="has(self.owner) == has(oldSelf.owner)",message="spec.github.owner is immutable (it cannot be set or removed): runners already registered would be orphaned; create a new RunnerPool instead"
// +kubebuilder:validation:XValidation:rule="has(self.repository) == has(oldSelf.repository)",message="spec.github.repository is immutable (it cannot be set or removed): runners already registered would be orphaned; create a new RunnerPool instead"
// +kubebuilder:validation:XValidation:rule="has(self.organization) == has(oldSelf.organization)",message="spec.github.organization is immutable (it cannot be set or removed): runners already registered would be orphaned; create a new RunnerPool instead"
// +kubebuilder:validation:XValidation:rule="has(self.scaleSet) == has(oldSelf.scaleSet)",message="spec.github.scaleSet cannot be set or removed: a pool's runners are registered either for its scale set or by webhook, never both; create a new RunnerPool to change the mode"
// +kubebuilder:validation:XValidation:rule="has(self.apiURL) == has(oldSelf.apiURL) && (!has(self.apiURL) || self.apiURL == oldSelf.apiURL)",message="spec.github.apiURL is immutable (it cannot be set, changed or removed): runners already registered on the old GitHub would be orphaned; create a new RunnerPool instead"
type GitHubRunnerScope struct {
	// Owner of the repository (user or organization).
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.github.owner is immutable: runners already registered would be orphaned"
	// +optional
	Owner string `json:"owner,omitempty"`
	// Repository name; with owner, runners register on that repository. It
	// wins over organization.
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.github.repository is immutable: runners already registered would be orphaned"
	// +optional
	Repository string `json:"repository,omitempty"`
	// Organization for organization-level runners.
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.github.organization is immutable: runners already registered would be orphaned"
	// +optional
	Organization string `json:"organization,omitempty"`
	// CredentialsRef names a Secret in this namespace with either a GitHub
	// App (appID, installationID, privateKey) or a personal access token
	// (token), usually synced by an ExternalSecret.
	// +required
	CredentialsRef meta.LocalObjectReference `json:"credentialsRef"`
	// APIURL for GitHub Enterprise Server, e.g. https://ghe.example.com/api/v3/.
	// Empty: https://api.github.com/.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +optional
	APIURL string `json:"apiURL,omitempty"`
	// ScaleSet switches the pool to GitHub's runner scale-set API: the
	// operator registers a scale set of this name (in spec.runnerGroup,
	// with spec.labels, or its name as the one label), holds its message
	// session and scales to the jobs GitHub assigns it. No inbound webhook
	// is needed. Unset: the pool scales on workflow_job webhooks and the
	// job poll. It cannot be set or removed later.
	// +optional
	ScaleSet *ScaleSetSpec `json:"scaleSet,omitempty"`
}

// ScaleSetSpec names a pool's runner scale set.
type ScaleSetSpec struct {
	// Name of the scale set, unique in its runner group; with no
	// spec.labels, jobs select it with runs-on: <name>. Changing it renames
	// the scale set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	// +required
	Name string `json:"name"`
}

// WebhookScaling turns workflow_job deliveries into scale-ups.
type WebhookScaling struct {
	// Enabled: scale up when a matching job is queued.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// PollInterval of the fallback that lists queued jobs, for deliveries
	// GitHub never made. 0s turns the poll off (webhooks alone scale the
	// pool); otherwise between 10s and 24h: each poll is a GitHub API call
	// counted against the rate limit, and a shorter interval would poll on
	// nearly every reconcile.
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) == duration('0s') || (duration(self) >= duration('10s') && duration(self) <= duration('24h')))",message="spec.webhookScaling.pollInterval must be 0s (off) or a duration between 10s and 24h, e.g. 1m"
	// +optional
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
}

// RunnerPoolStatus counts the pool's runners.
type RunnerPoolStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// DesiredReplicas the pool is scaling to.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`
	// Replicas that exist (machines claimed), for the scale subresource.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// PendingReplicas whose runner is not yet online.
	// +optional
	PendingReplicas int32 `json:"pendingReplicas,omitempty"`
	// IdleReplicas online and waiting for a job.
	// +optional
	IdleReplicas int32 `json:"idleReplicas,omitempty"`
	// BusyReplicas running a job.
	// +optional
	BusyReplicas int32 `json:"busyReplicas,omitempty"`
	// QueuedJobs matching this pool that no runner has taken yet.
	// +optional
	QueuedJobs int32 `json:"queuedJobs,omitempty"`
	// PendingDeregistrations are runners whose GitHub registration could not
	// be removed yet; they are retried.
	// +optional
	PendingDeregistrations int32 `json:"pendingDeregistrations,omitempty"`
	// Selector of the pool's MachineClaims, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// LastScaleTime is when the desired count last changed.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// ReachedScope is the GitHub scope ("owner/repository", or the
	// organization; on an Enterprise Server prefixed by its API host, as in
	// "ghe.example.com/owner/repository") the pool's own credentials were
	// last seen to reach: a
	// runner listing of that scope with them succeeded. Only a pool whose
	// reachedScope is its spec's scope takes that scope's jobs, so a pool
	// naming a repository its credentials cannot reach never takes the
	// demand of one that can. Kept in status so it survives restarts and
	// failovers; cleared when GitHub refuses the credentials.
	// +optional
	ReachedScope string `json:"reachedScope,omitempty"`
	// ScaleSet is the pool's runner scale set, with spec.github.scaleSet.
	// +optional
	ScaleSet *ScaleSetStatus `json:"scaleSet,omitempty"`
}

// ScaleSetSessionState is where the listener is with a scale set's
// message session.
// +kubebuilder:validation:Enum=Open;Waiting;Closed
type ScaleSetSessionState string

const (
	// ScaleSetSessionOpen: the session is held and polled.
	ScaleSetSessionOpen ScaleSetSessionState = "Open"
	// ScaleSetSessionWaiting: GitHub says another listener holds it.
	ScaleSetSessionWaiting ScaleSetSessionState = "Waiting"
	// ScaleSetSessionClosed: none is held (between attempts).
	ScaleSetSessionClosed ScaleSetSessionState = "Closed"
)

// ScaleSetStatus is what the operator knows of the pool's scale set.
type ScaleSetStatus struct {
	// ID is the scale set's ID in GitHub's Actions service.
	// +optional
	ID int64 `json:"id,omitempty"`
	// Created: this pool made the scale set, so deleting the pool deletes
	// it. False when it was found already there and adopted: it is then
	// left in place when the pool goes.
	// +optional
	Created bool `json:"created,omitempty"`
	// Session is the state of the message session, as the leader's
	// listener last reported it.
	// +optional
	Session ScaleSetSessionState `json:"session,omitempty"`
	// AssignedJobs is GitHub's count of jobs assigned to the scale set and
	// not finished (statistics.totalAssignedJobs): what the pool scales to.
	// +optional
	AssignedJobs int32 `json:"assignedJobs,omitempty"`
	// LastMessageTime is when the listener last heard from the session.
	// +optional
	LastMessageTime *metav1.Time `json:"lastMessageTime,omitempty"`
}

// RunnerPool keeps between minReplicas and maxReplicas ephemeral GitHub
// Actions runners, each on a fresh machine, scaling on queued jobs.
// The name is the hyperfleet.io/runnerpool label value on every claim and
// bootstrap Secret of the pool, so it is at most 63 characters.
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="a RunnerPool name may be at most 63 characters: it is the hyperfleet.io/runnerpool label value on the pool's MachineClaims and Secrets"
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=rp;rps,categories=hyperfleet
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minReplicas`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxReplicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.idleReplicas`
// +kubebuilder:printcolumn:name="Busy",type=integer,JSONPath=`.status.busyReplicas`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="ScaleSet",type=string,JSONPath=`.spec.github.scaleSet.name`,priority=1
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.status.scaleSet.session`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RunnerPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec RunnerPoolSpec `json:"spec"`
	// +optional
	Status RunnerPoolStatus `json:"status,omitempty"`
}

// RunnerPoolList is a list of RunnerPools.
// +kubebuilder:object:root=true
type RunnerPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RunnerPool `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &RunnerPool{}, &RunnerPoolList{})
}
