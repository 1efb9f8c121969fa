package performer

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
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
)

// outcome is what a reconcile concluded; setStatus turns it into status.
type outcome struct {
	phase   hourglassv1alpha1.PerformerPhase
	state   conditions.State
	reason  string
	message string
	// keepObservedGeneration: the reconcile failed part-way, so the status
	// does not yet describe this generation.
	keepObservedGeneration bool
}

func progressing(phase hourglassv1alpha1.PerformerPhase, reason, message string) outcome {
	return outcome{phase: phase, state: conditions.Progressing, reason: reason, message: message}
}

func stalled(phase hourglassv1alpha1.PerformerPhase, reason, message string) outcome {
	return outcome{phase: phase, state: conditions.Stalled, reason: reason, message: message}
}

func terminating() outcome {
	return outcome{phase: hourglassv1alpha1.PerformerTerminating, state: conditions.Progressing, reason: meta.DeletingReason,
		message: "the Performer is being deleted; its Pods and Service go with it"}
}

// retrying reports an error the reconcile will retry (an API call failed);
// the phase stays what it was, since nothing was learned about the Pods.
func retrying(s *scope, err error) outcome {
	phase := s.perf.Status.Phase
	if phase == "" {
		phase = hourglassv1alpha1.PerformerPending
	}
	return outcome{phase: phase, state: conditions.Waiting, reason: ReasonReconcileError,
		message: fmt.Sprintf("retrying: %v", err), keepObservedGeneration: true}
}

func invalidSpec(s *scope, se *specError) outcome {
	msg := se.message
	if s.serving != nil {
		msg += fmt.Sprintf("; Pod %s (version %s) keeps serving", s.serving.Name, s.serving.Annotations[AnnotationVersion])
	}
	return stalled(phaseFor(s), se.reason, msg)
}

// phaseFor is the phase when the reconcile stopped short of evaluate.
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

// evaluate concludes from the Pods how the Performer stands.
func evaluate(s *scope, pendingTimeout time.Duration, clusterDomain string) outcome {
	p, cur := s.perf, s.current
	if s.serving != nil && s.serving == cur {
		return outcome{phase: hourglassv1alpha1.PerformerRunning, state: conditions.Ready, reason: ReasonServing,
			message: fmt.Sprintf("version %s serves at %s", p.Spec.Version, Endpoint(p, clusterDomain))}
	}
	problem := podProblem(cur)
	if s.serving != nil {
		from := s.serving.Annotations[AnnotationVersion]
		if problem.stalled {
			return stalled(hourglassv1alpha1.PerformerUpgrading, problem.reason, fmt.Sprintf(
				"the upgrade to version %s is stuck: %s; version %s keeps serving from Pod %s", p.Spec.Version, problem.message, from, s.serving.Name))
		}
		return progressing(hourglassv1alpha1.PerformerUpgrading, ReasonUpgrading, fmt.Sprintf(
			"upgrading from version %s to %s: %s; version %s keeps serving until the new Pod is Ready", from, p.Spec.Version, problem.message, from))
	}
	switch {
	case problem.stalled:
		return stalled(hourglassv1alpha1.PerformerFailed, problem.reason, problem.message)
	case problem.reason == ReasonUnschedulable:
		return outcome{phase: hourglassv1alpha1.PerformerPending, state: conditions.Waiting, reason: ReasonUnschedulable,
			message: fmt.Sprintf("%s; it needs a node with %s, and is replaced if still Pending after %s",
				problem.message, describePlacement(cur), pendingTimeout)}
	default:
		return progressing(hourglassv1alpha1.PerformerPending, problem.reason, problem.message)
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
				"Pod %s cannot start its container (%s): check that the Secrets and ConfigMaps in spec.config.env and envFrom exist (kubectl describe pod %s)",
				pod.Name, w.Reason, pod.Name)}
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
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return problem{reason: ReasonPodStarting, message: fmt.Sprintf(
			"Pod %s runs but is not Ready: its gRPC health check on port %d does not pass yet", pod.Name, grpcPortOf(pod))}
	case corev1.PodUnknown:
		return problem{reason: ReasonPodStarting, message: fmt.Sprintf("Pod %s's node stopped reporting its state", pod.Name)}
	}
	if pod.Spec.NodeName != "" {
		return problem{reason: ReasonPodStarting, message: fmt.Sprintf("Pod %s is starting on node %s", pod.Name, pod.Spec.NodeName)}
	}
	return problem{reason: ReasonPodStarting, message: fmt.Sprintf("Pod %s is waiting to be scheduled", pod.Name)}
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

// setStatus writes phase, the service fields and the kstatus conditions.
func (r *Reconciler) setStatus(s *scope) {
	o := s.outcome
	if o.reason == "" {
		return
	}
	p := s.perf
	st := &p.Status
	st.Phase = o.phase
	if s.serviceReady {
		st.ServiceName = ServiceName(p.Name)
		st.DNSName = DNSName(p, r.ClusterDomain)
		st.GRPCEndpoint = Endpoint(p, r.ClusterDomain)
	}
	if o.phase != hourglassv1alpha1.PerformerTerminating && !o.keepObservedGeneration {
		shown := s.serving
		if shown == nil {
			shown = s.current
		}
		st.PodName, st.NodeName, st.CurrentVersion = "", "", ""
		if shown != nil {
			st.PodName, st.NodeName = shown.Name, shown.Spec.NodeName
		}
		if s.serving != nil {
			st.CurrentVersion = s.serving.Annotations[AnnotationVersion]
		}
	}
	generation := p.Generation
	if o.keepObservedGeneration {
		generation = st.ObservedGeneration
	} else {
		st.ObservedGeneration = p.Generation
	}
	conditions.Set(p, generation, conditions.Summary{State: o.state, Reason: o.reason, Message: o.message})
}

// recordTransition emits an event when the Performer becomes Running, or
// stalls for a new reason, so `kubectl get events` tells the story without
// an event per reconcile.
func (r *Reconciler) recordTransition(before, after *hourglassv1alpha1.Performer, s *scope) {
	o := s.outcome
	if o.reason == "" {
		return
	}
	beforeReason, _ := conditions.ReadyMessage(before)
	switch {
	case o.phase == hourglassv1alpha1.PerformerRunning && before.Status.Phase != hourglassv1alpha1.PerformerRunning:
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Running", "Reconcile", "Version %s is Ready at %s", after.Spec.Version, after.Status.GRPCEndpoint)
	case o.state == conditions.Stalled && beforeReason != o.reason:
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, o.reason, "Reconcile", "%s", o.message)
	}
}
