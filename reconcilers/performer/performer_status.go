package performer

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Ready condition reasons of Performers.
const (
	ReasonServing         = "Serving"
	ReasonUpgrading       = "Upgrading"
	ReasonPodStarting     = "PodStarting"
	ReasonUnschedulable   = "Unschedulable"
	ReasonImagePullFailed = "ImagePullFailed"
	ReasonContainerConfig = "ContainerConfigError"
	ReasonCrashLoop       = "CrashLoopBackOff"
	ReasonPodRejected     = "PodRejected"
	ReasonServiceConflict = "ServiceConflict"
	ReasonReconcileError  = "ReconcileError"
	ReasonAdoptingPods    = "AdoptingPods"
	// ReasonPendingTimeout: the Pod waited for a node past the pending
	// timeout. It is left to the scheduler, not recreated: an identical
	// Pod would wait the same.
	ReasonPendingTimeout = "PodPendingTimeout"
)

// computeStatus sets the status fields (phase, Service, serving Pod) from
// what the phases observed and returns the summary the Ready, Reconciling
// and Stalled conditions show. It is pure: the same observations give the
// same status.
func computeStatus(s *scope, err error) conditions.Summary {
	p := s.perf
	st := &p.Status
	if s.serviceReady {
		st.ServiceName = ServiceName(p.Name)
		st.DNSName = DNSName(p, s.clusterDomain)
		st.GRPCEndpoint = Endpoint(p, s.clusterDomain)
	}
	switch {
	case err != nil:
		// Nothing was learned about the Pods: the phase and Pod fields
		// stay as they were.
		if st.Phase == "" {
			st.Phase = hourglassv1alpha1.PerformerPending
		}
		return conditions.Summary{State: conditions.Waiting, Reason: ReasonReconcileError, Message: fmt.Sprintf("retrying: %v", err)}
	case s.adopting != "":
		// A one-time wait before the roll, with no Pods observed: the phase
		// and Pod fields stay as they were.
		if st.Phase == "" {
			st.Phase = hourglassv1alpha1.PerformerPending
		}
		return conditions.Summary{State: conditions.Progressing, Reason: ReasonAdoptingPods, Message: fmt.Sprintf(
			"waiting for the operator's cache to show Pod %s, labelled %s=%s", s.adopting, meta.ManagedByLabel, meta.ManagedByValue)}
	case !p.DeletionTimestamp.IsZero():
		st.Phase = hourglassv1alpha1.PerformerTerminating
		return conditions.Summary{State: conditions.Progressing, Reason: meta.DeletingReason,
			Message: "the Performer is being deleted; its Pods and Service go with it"}
	}
	phase, summary := rollSummary(s)
	st.Phase = phase
	readiness(s)
	shown := s.serving
	if shown == nil {
		shown = s.current
	}
	if shown == nil {
		shown = s.starting
	}
	st.PodName, st.NodeName, st.CurrentVersion = "", "", ""
	if shown != nil {
		st.PodName = shown.Name
	}
	if s.serving != nil {
		// The node of the serving Pod only: a starting Pod's binding would
		// cost a status write per Performer for what `kubectl get pod -o
		// wide` shows.
		st.NodeName = s.serving.Spec.NodeName
		st.CurrentVersion = s.serving.Annotations[AnnotationVersion]
	}
	return summary
}

// rollSummary is the phase and summary of a reconcile that ran: what
// stopped the roll short, else how its Pods stand.
func rollSummary(s *scope) (hourglassv1alpha1.PerformerPhase, conditions.Summary) {
	switch {
	case s.invalid != nil:
		msg := s.invalid.message
		if s.serving != nil {
			msg += fmt.Sprintf("; Pod %s (version %s) keeps serving", s.serving.Name, s.serving.Annotations[AnnotationVersion])
		}
		return phaseFor(s), stalled(s.invalid.reason, msg)
	case s.starting != nil:
		// The same words as once the cache shows it: no status write for the
		// cache catching up.
		return hourglassv1alpha1.PerformerPending, conditions.Summary{State: conditions.Progressing, Reason: ReasonPodStarting,
			Message: startingMessage(s.starting)}
	case s.rejected != nil:
		return phaseFor(s), stalled(ReasonPodRejected, fmt.Sprintf(
			"the API server rejected the Pod: %v; fix the Performer, the placement table or the namespace's policy", s.rejected))
	case s.serviceConflict != nil:
		return phaseFor(s), stalled(s.serviceConflict.reason, s.serviceConflict.message)
	}
	return podSummary(s)
}

func stalled(reason, message string) conditions.Summary {
	return conditions.Summary{State: conditions.Stalled, Reason: reason, Message: message}
}

// phaseFor is the phase when the roll stopped short of its end.
func phaseFor(s *scope) hourglassv1alpha1.PerformerPhase {
	switch {
	case s.serving != nil && s.serving == s.current:
		return hourglassv1alpha1.PerformerRunning
	case s.serving != nil:
		return hourglassv1alpha1.PerformerUpgrading
	default:
		return hourglassv1alpha1.PerformerFailed
	}
}

// podSummary concludes from the Pods how the Performer stands.
func podSummary(s *scope) (hourglassv1alpha1.PerformerPhase, conditions.Summary) {
	p, cur := s.perf, s.current
	if s.serving != nil && s.serving == cur {
		return hourglassv1alpha1.PerformerRunning, conditions.Summary{State: conditions.Ready, Reason: ReasonServing,
			Message: fmt.Sprintf("version %s serves at %s", Version(p), Endpoint(p, s.clusterDomain))}
	}
	problem := podProblem(cur)
	if cur != nil && !problem.stalled && cur.Spec.NodeName == "" && pendingFor(cur, s.now) >= s.pendingTimeout {
		problem = pendingTimeout(cur, s.pendingTimeout)
	}
	if s.serving != nil {
		from := s.serving.Annotations[AnnotationVersion]
		if problem.stalled {
			return hourglassv1alpha1.PerformerUpgrading, stalled(problem.reason, fmt.Sprintf(
				"the upgrade to version %s is stuck: %s; version %s keeps serving from Pod %s", Version(p), problem.message, from, s.serving.Name))
		}
		return hourglassv1alpha1.PerformerUpgrading, conditions.Summary{State: conditions.Progressing, Reason: ReasonUpgrading, Message: fmt.Sprintf(
			"upgrading from version %s to %s: %s; version %s keeps serving until the new Pod is Ready", from, Version(p), problem.message, from)}
	}
	switch {
	case problem.stalled:
		return hourglassv1alpha1.PerformerFailed, stalled(problem.reason, problem.message)
	case problem.reason == ReasonUnschedulable:
		return hourglassv1alpha1.PerformerPending, conditions.Summary{State: conditions.Waiting, Reason: ReasonUnschedulable,
			Message: fmt.Sprintf("%s; it needs a node with %s, and the Performer is marked Stalled if none fits within %s",
				problem.message, describePlacement(cur), s.pendingTimeout)}
	default:
		return hourglassv1alpha1.PerformerPending, conditions.Summary{State: conditions.Progressing, Reason: problem.reason, Message: problem.message}
	}
}

// problem is what stands between a Pod and Ready.
type problem struct {
	reason, message string
	// stalled: the Pod will not get better without someone changing something.
	stalled bool
}

// podProblem reads a Pod's status. Messages are built from stable parts
// only (no kubelet back-off counters, no restart counts), so the
// condition does not change with every retry; `kubectl describe pod` has
// the detail.
func podProblem(pod *corev1.Pod) problem {
	if pod == nil {
		return problem{reason: ReasonPodStarting, message: "the Pod is being created"}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			return problem{reason: ReasonImagePullFailed, stalled: true, message: fmt.Sprintf(
				"Pod %s cannot pull image %s (%s): check spec.image, spec.version and spec.imagePullSecrets (kubectl describe pod %s)",
				pod.Name, cs.Image, w.Reason, pod.Name)}
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return problem{reason: ReasonContainerConfig, stalled: true, message: fmt.Sprintf(
				"Pod %s cannot start its container (%s): %s (kubectl describe pod %s)", pod.Name, w.Reason, containerConfigHint(w.Message), pod.Name)}
		case "CrashLoopBackOff":
			exit := ""
			if t := cs.LastTerminationState.Terminated; t != nil {
				exit = fmt.Sprintf(" with exit code %d", t.ExitCode)
				if t.Reason != "" {
					exit += " (" + t.Reason + ")"
				}
			}
			return problem{reason: ReasonCrashLoop, stalled: true, message: fmt.Sprintf(
				"the performer in Pod %s keeps exiting%s: see kubectl logs %s --previous", pod.Name, exit, pod.Name)}
		}
	}
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		return problem{reason: ReasonUnschedulable, message: fmt.Sprintf("Pod %s cannot be scheduled: %s", pod.Name, strings.TrimSpace(c.Message))}
	}
	if pod.Status.Phase == corev1.PodUnknown {
		return problem{reason: ReasonPodStarting, message: fmt.Sprintf("Pod %s's node stopped reporting its state", pod.Name)}
	}
	return problem{reason: ReasonPodStarting, message: startingMessage(pod)}
}

// pendingTimeout is the problem of a Pod that found no node within the
// bound: someone must add a node or change the placement. The Pod is kept
// (a new one would wait the same) and placed as soon as a node fits.
func pendingTimeout(pod *corev1.Pod, bound time.Duration) problem {
	return problem{reason: ReasonPendingTimeout, stalled: true, message: fmt.Sprintf(
		"Pod %s has waited for a node for longer than %s%s; it needs a node with %s: add such a node or change spec.hardwareRequirements or spec.scheduling "+
			"(it is not recreated, a new Pod would wait the same; the scheduler places it as soon as a node fits)",
		pod.Name, bound, podCause(pod), describePlacement(pod))}
}

// startingMessage is the one message of a Pod on its normal way to Ready,
// from its creation through scheduling to its first health check: each
// step a message of its own would cost a status write per Performer.
func startingMessage(pod *corev1.Pod) string {
	return fmt.Sprintf("Pod %s is starting; it serves once its gRPC health check on port %d passes (kubectl describe pod %s shows how far it got)",
		pod.Name, grpcPortOf(pod), pod.Name)
}

func grpcPortOf(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == portName {
				return port.ContainerPort
			}
		}
	}
	return DefaultGRPCPort
}

// describePlacement says what node the Pod needs, for the Unschedulable message.
func describePlacement(pod *corev1.Pod) string {
	var parts []string
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+pod.Spec.NodeSelector[k])
	}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Limits {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory && name != corev1.ResourceEphemeralStorage {
				parts = append(parts, fmt.Sprintf("%s %s free", q.String(), name))
			}
		}
	}
	if rc := pod.Spec.RuntimeClassName; rc != nil {
		parts = append(parts, "runtime class "+*rc)
	}
	if len(parts) == 0 {
		return "room for its resource requests"
	}
	return strings.Join(parts, ", ")
}

// recordEvents emits an event when the Performer runs again after it
// failed, or stalls for a new reason, comparing the status as read with the
// status as written, so `kubectl get events` tells what someone should
// notice without an event per reconcile. A first start is not an event: the
// Ready condition's transition time tells it, and an event per Performer
// would be a write per Performer.
func (r *Reconciler) recordEvents(_ *scope, before, after *hourglassv1alpha1.Performer, _ conditions.Summary) {
	switch {
	case after.Status.Phase == hourglassv1alpha1.PerformerRunning && before.Status.Phase == hourglassv1alpha1.PerformerFailed:
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Running", "Reconcile", "Version %s is Ready at %s", Version(after), after.Status.GRPCEndpoint)
	case apimeta.IsStatusConditionTrue(after.Status.Conditions, meta.StalledCondition):
		skeleton.ReasonEvent(r.Recorder, before, after, "Reconcile", true)
	}
}
