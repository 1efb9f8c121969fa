package performer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/serverside"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Event reasons.
const (
	EventPodCreated        = "PodCreated"
	EventPodFailed         = "PodFailed"
	EventPodPendingTimeout = "PodPendingTimeout"
	EventUpgraded          = "Upgraded"
)

// Reasons a Pod was replaced, in events and the recreations metric.
const (
	recreateFailed  = "Failed"
	recreatePending = "PendingTimeout"
)

// observePods lists the Performer's Pods and renders the desired
// revision's Pod. A spec that cannot make a Pod stops the roll and leaves
// whatever runs alone: a Pod of the last good spec keeps serving.
func (r *Reconciler) observePods(ctx context.Context, s *scope) (skeleton.Result, error) {
	p := s.perf
	pods, err := r.ownedPods(ctx, p)
	if err != nil {
		return skeleton.Stop(), err
	}
	desired, hash, err := desiredPod(p, r.Placement)
	var se *specError
	if errors.As(err, &se) {
		s.old = pods
		s.serving = pickServing(pods, r.servingHash(ctx, p))
		s.invalid = se
		return skeleton.Stop(), nil
	}
	if err != nil {
		return skeleton.Stop(), err
	}
	s.desired, s.hash = desired, hash
	for _, pod := range pods {
		if pod.Labels[LabelTemplateHash] == hash {
			s.currents = append(s.currents, pod)
		} else {
			s.old = append(s.old, pod)
		}
	}
	return skeleton.Continue(), nil
}

// createPod makes the desired revision's Pod unless one lives.
func (r *Reconciler) createPod(ctx context.Context, s *scope) (skeleton.Result, error) {
	if s.current != nil {
		return skeleton.Continue(), nil
	}
	return r.create(ctx, s)
}

// routeService points the Service at the Ready Pod: the new revision's once
// Ready, until then the one it routes to now.
func (r *Reconciler) routeService(ctx context.Context, s *scope) (skeleton.Result, error) {
	p := s.perf
	previousHash := r.servingHash(ctx, p)
	routeTo, serving, keep := chooseRoute(s.current, s.old, previousHash, s.hash)
	s.serving, s.keep = serving, keep
	if err := r.ensureService(ctx, s, routeTo); err != nil {
		if errors.Is(err, errLookForOriginal) {
			return skeleton.StopAndRequeue(time.Millisecond), nil
		}
		var se *specError
		if errors.As(err, &se) {
			s.serviceConflict = se
			return skeleton.Stop(), nil
		}
		return skeleton.Stop(), err
	}
	s.serviceReady = true
	if previousHash != "" && previousHash != s.hash && serving == s.current {
		s.upgraded = true
		r.Recorder.Eventf(p, s.current, corev1.EventTypeNormal, EventUpgraded, "Upgrade",
			"Version %s is Ready in Pod %s and the Service now routes to it", Version(p), s.current.Name)
	}
	return skeleton.Continue(), nil
}

// removeOld deletes the Pods of older revisions the Service no longer
// needs; only now, with the Service routed, may they go.
func (r *Reconciler) removeOld(ctx context.Context, s *scope) (skeleton.Result, error) {
	for _, pod := range s.old {
		if s.keep[pod] {
			continue
		}
		if err := r.deletePod(ctx, pod); err != nil {
			return skeleton.Stop(), err
		}
	}
	return skeleton.Continue(), nil
}

// ownedPods are the Performer's Pods that are not terminating, from the
// cache. Terminating Pods are out of the count so a replacement is made
// even while one hangs on a lost node.
func (r *Reconciler) ownedPods(ctx context.Context, p *hourglassv1alpha1.Performer) ([]*corev1.Pod, error) {
	return listOwned(ctx, r.Client, p)
}

func listOwned(ctx context.Context, c client.Reader, p *hourglassv1alpha1.Performer) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingLabels(selectorLabels(p))); err != nil {
		return nil, fmt.Errorf("listing the Pods of Performer %s: %w", p.Name, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		pod := &list.Items[i]
		if metav1.IsControlledBy(pod, p) && pod.DeletionTimestamp.IsZero() {
			out = append(out, pod)
		}
	}
	return out, nil
}

// replaceBroken deletes the desired revision's Pods that failed, or were
// bound to a node that did not start them within the pending timeout, with
// an event saying why, and keeps the best of the rest. The replacement is
// made by createPod in the same reconcile. A Pod still waiting for a node is
// kept, however long: a new Pod would wait the same, so recreating it would
// only cost writes (at 1,000 Performers, hundreds every few minutes);
// computeStatus marks the Performer Stalled instead.
func (r *Reconciler) replaceBroken(ctx context.Context, s *scope) (skeleton.Result, error) {
	var keep []*corev1.Pod
	var after time.Duration
	for _, pod := range s.currents {
		stuck := pod.Spec.NodeName != "" && pendingFor(pod, s.now) >= r.PendingTimeout
		if (isFinished(pod) || stuck) && !r.stillThere(ctx, pod) {
			// Deleted by an earlier reconcile the cache has not caught up
			// with: already replaced, so no second event or count.
			continue
		}
		switch {
		case isFinished(pod):
			podRecreations.WithLabelValues(recreateFailed).Inc()
			r.Recorder.Eventf(s.perf, pod, corev1.EventTypeWarning, EventPodFailed, "Recreate",
				"Pod %s %s%s; creating a replacement", pod.Name, finishedVerb(pod), podCause(pod))
		case stuck:
			podRecreations.WithLabelValues(recreatePending).Inc()
			r.Recorder.Eventf(s.perf, pod, corev1.EventTypeWarning, EventPodPendingTimeout, "Recreate",
				"Pod %s was bound to node %s but not started there within %s%s; creating a replacement, which the scheduler may place elsewhere",
				pod.Name, pod.Spec.NodeName, r.PendingTimeout, podCause(pod))
		default:
			if pending := pendingFor(pod, s.now); isPending(pod) && pending < r.PendingTimeout {
				// Look again when the bound runs out, if nothing else happens
				// first: to replace it if bound, to say Stalled if not.
				after = skeleton.Shortest(after, requeueWithin(r.PendingTimeout-pending))
			}
			keep = append(keep, pod)
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Replacing a broken performer Pod", "pod", pod.Name, "phase", pod.Status.Phase)
		if err := r.deletePod(ctx, pod); err != nil {
			return skeleton.Stop(), err
		}
	}
	if err := r.removeTwins(ctx, keep); err != nil {
		return skeleton.Stop(), err
	}
	if len(keep) > 0 {
		s.current = keep[0]
	}
	return skeleton.Requeue(after), nil
}

// stillThere asks the API server whether pod exists and is not being
// deleted; only on the rare way to a replacement, so it costs little.
func (r *Reconciler) stillThere(ctx context.Context, pod *corev1.Pod) bool {
	live := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live); err != nil {
		// Unsure (an API error): act as if it is, deletion is idempotent.
		return !apierrors.IsNotFound(err)
	}
	return live.UID == pod.UID && live.DeletionTimestamp.IsZero()
}

// removeTwins keeps the best Pod of a revision and deletes the others. Twins
// only arise if the cache hid a fresh Pod from an earlier reconcile, which
// createPod guards against; this makes the outcome right regardless.
func (r *Reconciler) removeTwins(ctx context.Context, pods []*corev1.Pod) error {
	sort.SliceStable(pods, func(i, j int) bool {
		if ri, rj := isReady(pods[i]), isReady(pods[j]); ri != rj {
			return ri
		}
		if !pods[i].CreationTimestamp.Equal(&pods[j].CreationTimestamp) {
			return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
		}
		return pods[i].Name < pods[j].Name
	})
	for _, extra := range pods[min(1, len(pods)):] {
		ctrl.LoggerFrom(ctx).Info("Deleting a duplicate performer Pod", "pod", extra.Name)
		if err := r.deletePod(ctx, extra); err != nil {
			return err
		}
	}
	return nil
}

// madePod is a Pod create made: its revision and name.
type madePod struct{ hash, name string }

// create makes the desired revision's Pod. The cache may not show a Pod
// this reconciler made a moment ago; but only a Pod this process made can
// be missing from the cache for long (a new process fills its cache
// before it reconciles), so the process remembers the last Pod it made per
// Performer. Only when that Pod is of the desired revision and the cache
// does not show it is the API server asked, for that Pod by name: a
// Performer's first Pod, and every Pod the cache already shows, cost no
// read.
//
// A Pod an earlier leader made just before it handed over is the
// exception: the new leader's cache may not show it yet, and it remembers
// nothing of it. So the first Pod of a revision has a fixed name,
// firstPodName: the API server refuses a second create of it, and only
// then is it read. A replacement has a generated name, so it can start
// while the Pod it replaces is still terminating (on a lost node, for
// ever).
func (r *Reconciler) create(ctx context.Context, s *scope) (skeleton.Result, error) {
	made, madeOne := r.made.Load(s.perf)
	madeOne = madeOne && made.hash == s.hash
	if madeOne && !listed(s, made.name) {
		live := &corev1.Pod{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.perf.Namespace, Name: made.name}, live)
		switch {
		case err == nil && live.DeletionTimestamp.IsZero() && !isFinished(live):
			// Wait for the cache to show it.
			s.starting = live
			return skeleton.StopAndRequeue(requeueWithin(time.Second)), nil
		case err != nil && !apierrors.IsNotFound(err):
			return skeleton.Stop(), fmt.Errorf("reading Pod %s: %w", made.name, err)
		}
		// Gone, going or finished: a replacement is due.
	}
	pod := s.desired.DeepCopy()
	if len(s.currents) == 0 && !madeOne {
		// No Pod of this revision seen or made here: its first.
		pod.Name, pod.GenerateName = firstPodName(s.perf, s.hash), ""
	}
	return r.makePod(ctx, s, pod)
}

// firstPodName names the first Pod of a revision: performer-<name>-<hash>.
// Generated names (a replacement's) add a suffix, so never clash with it.
func firstPodName(p *hourglassv1alpha1.Performer, hash string) string {
	return fmt.Sprintf("%s-%s", ServiceName(p.Name), hash)
}

// makePod creates pod, the desired revision's.
func (r *Reconciler) makePod(ctx context.Context, s *scope, pod *corev1.Pod) (skeleton.Result, error) {
	if err := controllerutil.SetControllerReference(s.perf, pod, r.Scheme); err != nil {
		return skeleton.Stop(), err
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) && pod.Name != "" {
			return r.nameTaken(ctx, s, pod.Name)
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			// Admission refused it: a missing RuntimeClass, a quota, a
			// policy. Someone must act; look again now and then, since the
			// fix may be outside the Performer (installing the runtime).
			s.rejected = err
			s.serving = pickServing(s.old, r.servingHash(ctx, s.perf))
			return skeleton.StopAndRequeue(time.Minute), nil
		}
		return skeleton.Stop(), fmt.Errorf("creating the Pod: %w", err)
	}
	if len(s.old) > 0 {
		// The start of an upgrade. A first Pod is no event (the status names
		// it, and an event per Performer is a write per Performer); a
		// replacement's event is the failure's.
		r.Recorder.Eventf(s.perf, pod, corev1.EventTypeNormal, EventPodCreated, "Create",
			"Created Pod %s running %s", pod.Name, pod.Spec.Containers[0].Image)
	}
	r.made.Store(s.perf, madePod{hash: s.hash, name: pod.Name})
	s.current = pod
	return skeleton.Continue(), nil
}

// nameTaken settles a first Pod's create the API server refused because
// the name is taken; only now is the API server read. Someone else's Pod
// of the name is refused, not taken over: the Performer is Stalled until
// it is deleted or renamed. One of this Performer's that lives (an earlier
// leader's, which the cache does not show yet) is waited for, not
// doubled. One of its own that finished or is going was this revision's
// first Pod; a replacement of it may live that the cache does not show
// either, so the Performer's Pods are listed (only on this rare way), and
// without a live one a replacement is made under a generated name.
func (r *Reconciler) nameTaken(ctx context.Context, s *scope, name string) (skeleton.Result, error) {
	live := &corev1.Pod{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.perf.Namespace, Name: name}, live)
	switch {
	case apierrors.IsNotFound(err):
		// Went in between: make it on the next look.
		return skeleton.StopAndRequeue(requeueWithin(time.Second)), nil
	case err != nil:
		return skeleton.Stop(), fmt.Errorf("reading Pod %s: %w", name, err)
	case !metav1.IsControlledBy(live, s.perf):
		s.serviceConflict = &specError{reason: ReasonObjectConflict, message: fmt.Sprintf(
			"Pod %s exists and is not managed by this Performer: delete or rename it so the operator can make its own", name)}
		s.serving = pickServing(s.old, r.servingHash(ctx, s.perf))
		return skeleton.StopAndRequeue(time.Minute), nil
	case live.DeletionTimestamp.IsZero() && !isFinished(live):
		r.made.Store(s.perf, madePod{hash: s.hash, name: name})
		s.starting = live
		return skeleton.StopAndRequeue(requeueWithin(time.Second)), nil
	}
	pods, err := listOwned(ctx, r.APIReader, s.perf)
	if err != nil {
		return skeleton.Stop(), err
	}
	for _, pod := range pods {
		if pod.Labels[LabelTemplateHash] == s.hash && !isFinished(pod) {
			r.made.Store(s.perf, madePod{hash: s.hash, name: pod.Name})
			s.starting = pod
			return skeleton.StopAndRequeue(requeueWithin(time.Second)), nil
		}
	}
	return r.makePod(ctx, s, s.desired.DeepCopy())
}

// listed: the cache showed the Pod named name in this reconcile, alive.
func listed(s *scope, name string) bool {
	for _, pods := range [][]*corev1.Pod{s.currents, s.old} {
		for _, pod := range pods {
			if pod.Name == name {
				return true
			}
		}
	}
	return false
}

func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	// The UID precondition keeps a stale view from deleting a newer Pod.
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting Pod %s: %w", pod.Name, err)
	}
	return nil
}

// servingHash is the revision the Service routes to now, "" if none.
func (r *Reconciler) servingHash(ctx context.Context, p *hourglassv1alpha1.Performer) string {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ServiceName(p.Name)}, svc); err != nil {
		return ""
	}
	if !metav1.IsControlledBy(svc, p) {
		return ""
	}
	return svc.Spec.Selector[LabelTemplateHash]
}

// chooseRoute decides which revision the Service routes to, which Pod
// serves, and which Pods of older revisions must stay. The new revision
// takes over only once its Pod is Ready. Until then the revision routed to
// now keeps all its running Pods, even one that fails a readiness probe for
// a moment, so a blip during an upgrade cannot cut the old Pod loose.
func chooseRoute(current *corev1.Pod, old []*corev1.Pod, routed, desired string) (string, *corev1.Pod, map[*corev1.Pod]bool) {
	if isReady(current) {
		return desired, current, nil
	}
	if routed != "" && routed != desired {
		keep := map[*corev1.Pod]bool{}
		var serving *corev1.Pod
		for _, pod := range old {
			if pod.Labels[LabelTemplateHash] != routed || isFinished(pod) {
				continue
			}
			keep[pod] = true
			if isReady(pod) {
				serving = pod
			}
		}
		if len(keep) > 0 {
			return routed, serving, keep
		}
	}
	if pod := pickServing(old, ""); pod != nil {
		return pod.Labels[LabelTemplateHash], pod, map[*corev1.Pod]bool{pod: true}
	}
	return desired, nil, nil
}

// pickServing chooses, among Pods of older revisions, the Ready one to keep
// serving: the one the Service routes to if Ready, else the newest Ready.
func pickServing(pods []*corev1.Pod, routed string) *corev1.Pod {
	var best *corev1.Pod
	for _, pod := range pods {
		if !isReady(pod) {
			continue
		}
		if routed != "" && pod.Labels[LabelTemplateHash] == routed {
			return pod
		}
		if best == nil || best.CreationTimestamp.Before(&pod.CreationTimestamp) {
			best = pod
		}
	}
	return best
}

// ensureService makes the Service route to the revision hash. It writes
// only when something differs, so a Pod's every status change does not
// cost a write.
//
// The cache holds only Services labelled as the operator's: someone else's
// Service of this name, or the original Hourglass operator's, is invisible
// to it. When the cache shows none, the Service is created, not applied:
// the API server refuses a create whose name is taken, changing nothing, so
// the common case (the name is free) costs no read, and an apply, which
// would take over whatever has the name, never meets a Service that is not
// ours. Only when the create conflicts is the Service read past the cache:
// someone else's is refused, the original operator's adopted (the apply
// adds the label), and one of ours the cache does not show yet (made a
// moment ago) brought up to date.
func (r *Reconciler) ensureService(ctx context.Context, s *scope, hash string) error {
	p := s.perf
	want, err := r.desiredService(p, hash)
	if err != nil {
		return err
	}
	existing := &corev1.Service{}
	key := client.ObjectKeyFromObject(want)
	err = r.Client.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		err = serverside.Create(ctx, r.Client, FieldOwner, want)
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("creating the Service: %w", err)
			}
			return nil
		}
		err = r.APIReader.Get(ctx, key, existing)
		if err == nil && metav1.IsControlledBy(existing, p) && existing.Labels[meta.ManagedByLabel] != meta.ManagedByValue {
			// The original operator's Service of this Performer: its
			// Pods may be as invisible to the cache. Unless adoptLegacy
			// looked for them, route nothing yet (the Service would move
			// off a Pod of that operator's that still serves): it looks
			// on the next reconcile.
			if how, _ := r.adopted.Load(p); how != adoptListed {
				r.adopted.Store(p, adoptMustList)
				return errLookForOriginal
			}
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return fmt.Errorf("reading the Service: %w", err)
	case !metav1.IsControlledBy(existing, p):
		return &specError{reason: ReasonServiceConflict, message: fmt.Sprintf(
			"Service %s exists and is not managed by this Performer: delete or rename it so the operator can make its own", existing.Name)}
	}
	if existing != nil && serviceUpToDate(existing, want) {
		return nil
	}
	if existing == nil {
		// Gone between the create and the read: make it again next time.
		return fmt.Errorf("the Service %s went while being made", key.Name)
	}
	if err := serverside.Update(ctx, r.Client, r.APIReader, FieldOwner, want, existing); err != nil {
		return fmt.Errorf("applying the Service: %w", err)
	}
	return nil
}

func (r *Reconciler) desiredService(p *hourglassv1alpha1.Performer, hash string) (*corev1.Service, error) {
	selector := selectorLabels(p)
	if hash != "" {
		selector[LabelTemplateHash] = hash
	}
	// else a Pod of the original operator (no revision label) serves; the
	// Service selects by Performer alone until a Pod of ours is Ready.
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ServiceName(p.Name),
			Namespace: p.Namespace,
			Labels:    commonLabels(p),
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selector,
			// The port is the spec's; the target is the port's name, so the
			// Pod of an older revision still gets traffic on its own port
			// until the new one takes over.
			Ports: []corev1.ServicePort{{
				Name: portName, Port: GRPCPort(p), TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
	if err := controllerutil.SetControllerReference(p, svc, r.Scheme); err != nil {
		return nil, err
	}
	return svc, nil
}

func serviceUpToDate(have, want *corev1.Service) bool {
	if have.Spec.Type != want.Spec.Type || !maps.Equal(have.Spec.Selector, want.Spec.Selector) || len(have.Spec.Ports) != len(want.Spec.Ports) {
		return false
	}
	for i, w := range want.Spec.Ports {
		h := have.Spec.Ports[i]
		if h.Name != w.Name || h.Port != w.Port || h.TargetPort != w.TargetPort || h.Protocol != w.Protocol {
			return false
		}
	}
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	return true
}

// Pod state helpers.

func isReady(pod *corev1.Pod) bool {
	if pod == nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// isFinished: with restartPolicy Always a Pod only ends when something
// outside it gave up on it (eviction, node shutdown); it never comes back.
func isFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

func finishedVerb(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodSucceeded {
		return "exited"
	}
	return "failed"
}

func isPending(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodPending || pod.Status.Phase == ""
}

// pendingFor is how long pod has been Pending at now, 0 if it is not:
// since it was made while it waits for a node, since it was bound once it
// has one (a Pod placed after a long wait gets the whole bound to start).
func pendingFor(pod *corev1.Pod, now time.Time) time.Duration {
	if !isPending(pod) {
		return 0
	}
	since := pod.CreationTimestamp.Time
	if c := podCondition(pod, corev1.PodScheduled); pod.Spec.NodeName != "" && c != nil && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	return now.Sub(since)
}

// podCause is a short " (reason: message)" from the Pod's status, for events.
func podCause(pod *corev1.Pod) string {
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		return fmt.Sprintf(" (%s: %s)", pod.Status.Reason, pod.Status.Message)
	}
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
		return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf(" (container %s: %s)", cs.Name, w.Reason)
		}
	}
	return ""
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
