package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// RunnerJobState is how far a GitHub Actions job has come. It only moves
// forward (Waiting, Queued, InProgress, Completed), so a late or
// redelivered "queued" can never make a job count as demand again.
// +kubebuilder:validation:Enum=Waiting;Queued;InProgress;Completed
type RunnerJobState string

// The states of a RunnerJob, in the only order they may take.
const (
	// JobWaiting: the job waits for an environment's approval; it needs
	// no runner yet.
	JobWaiting RunnerJobState = "Waiting"
	// JobQueued: the job waits for a runner; it is demand.
	JobQueued RunnerJobState = "Queued"
	// JobInProgress: a runner took the job.
	JobInProgress RunnerJobState = "InProgress"
	// JobCompleted: the job ended (or was cancelled).
	JobCompleted RunnerJobState = "Completed"
)

// Rank orders the states; an unknown state ranks 0.
func (s RunnerJobState) Rank() int {
	switch s {
	case JobWaiting:
		return 1
	case JobQueued:
		return 2
	case JobInProgress:
		return 3
	case JobCompleted:
		return 4
	}
	return 0
}

// RunnerJobSpec is the job GitHub announced: what routed it to its pool.
type RunnerJobSpec struct {
	// PoolRef names the RunnerPool, in this namespace, whose runners the job
	// needs. Set once, when the job is first recorded.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.poolRef is immutable: a job is routed once"
	PoolRef meta.LocalObjectReference `json:"poolRef"`
	// JobID is GitHub's workflow job ID; the object's name is job-<jobID>.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.jobID is immutable"
	JobID int64 `json:"jobID"`
	// RunID is the job's workflow run.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RunID int64 `json:"runID,omitempty"`
	// Repository is "owner/name", the repository whose workflow runs the job.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=140
	Repository string `json:"repository"`
	// Labels are the job's runs-on labels.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	Labels []string `json:"labels,omitempty"`
}

// RunnerJobStatus is what GitHub last reported of the job. It is written
// together with the object (the kind has no status subresource), so the
// create that deduplicates a job records its state in the same request.
type RunnerJobStatus struct {
	// State is how far the job has come: Waiting, Queued, InProgress or
	// Completed. It only moves forward; the API server refuses a step back.
	// +required
	// +kubebuilder:validation:XValidation:rule="{'Waiting':1,'Queued':2,'InProgress':3,'Completed':4}[self] >= {'Waiting':1,'Queued':2,'InProgress':3,'Completed':4}[oldSelf]",message="status.state only moves forward: Waiting, Queued, InProgress, Completed"
	State RunnerJobState `json:"state"`
	// RunnerName is the runner GitHub gave the job (InProgress, Completed).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	RunnerName string `json:"runnerName,omitempty"`
	// Source says who last advanced the record: Webhook or Poll.
	// +optional
	// +kubebuilder:validation:Enum=Webhook;Poll
	Source string `json:"source,omitempty"`
	// QueuedAt is when the job was first recorded as needing a runner.
	// +optional
	QueuedAt *metav1.Time `json:"queuedAt,omitempty"`
	// LastTransitionTime is when State last changed; finished records are
	// deleted a retention period after it.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// RunnerJob records one GitHub Actions job routed to a RunnerPool, so the
// pool's demand lives in the API server: it survives restarts and
// failovers, and any replica that receives a webhook delivery can record
// it. The name job-<id> deduplicates a job across deliveries, replicas and
// the polling fallback. Made and deleted by the operator; the pool owns
// them, so deleting the pool deletes them.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=rj
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Repository",type=string,JSONPath=`.spec.repository`
// +kubebuilder:printcolumn:name="Runner",type=string,JSONPath=`.status.runnerName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RunnerJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec RunnerJobSpec `json:"spec"`
	// +optional
	Status RunnerJobStatus `json:"status,omitempty"`
}

// RunnerJobList is a list of RunnerJobs.
// +kubebuilder:object:root=true
type RunnerJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RunnerJob `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &RunnerJob{}, &RunnerJobList{})
}
