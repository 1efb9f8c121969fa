package machineclaim_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// errCut is what a provider whose process died gets for every later write.
var errCut = errors.New("process died")

// cutProvider is a KubeVirt provider that dies after allowed writes: the
// writes before the cut land, none after.
func cutProvider(t *testing.T, allowed int32) *kubevirt.Provider {
	t.Helper()
	var writes atomic.Int32
	write := func() error {
		if writes.Add(1) > allowed {
			return errCut
		}
		return nil
	}
	wrapped, err := client.NewWithWatch(testenv.Config(), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	dying := interceptor.NewClient(wrapped, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	return newCutTestProvider(t, dying)
}

func newCutTestProvider(t *testing.T, c client.Client) *kubevirt.Provider {
	t.Helper()
	p, err := kubevirt.New(kubevirt.Config{Client: c, OwnerKind: "CutTest", Installation: "cut-test"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeVirtCreateCutShortAtEveryStep kills the provider after each of
// Create's writes in turn (the halted VM, the cloud-init Secret, the start).
// At every cut, no cloud-init Secret exists without the VM that owns it, so
// nothing can outlive the VM: Kubernetes' garbage collector or the VM's
// deletion takes it. Then either a new Create finishes the start (the
// operator came back) or Delete removes everything (the claim went away
// meanwhile, the sweeper's case).
func TestKubeVirtCreateCutShortAtEveryStep(t *testing.T) {
	l := newKubeVirtLab(t)
	ctx := context.Background()
	healthy := newCutTestProvider(t, l.C)
	for cut := range int32(3) {
		for _, then := range []string{"resume", "abandon"} {
			name := fmt.Sprintf("cut%d-%s", cut, then)
			t.Run(name, func(t *testing.T) {
				spec := providers.MachineSpec{
					Ref:       providers.MachineRef{Name: name, Namespace: l.NS},
					Owner:     providers.Owner{UID: "uid-" + name, Namespace: l.NS, Name: name},
					CloudInit: providers.CloudInitSpec{UserData: "#cloud-config\nhostname: " + name + "\n"},
					KubeVirt:  &providers.KubeVirtSpec{Template: []byte(hypervisorlab.KubeVirtVM)},
				}
				if _, err := cutProvider(t, cut).Create(ctx, spec); !errors.Is(err, errCut) {
					t.Fatalf("Create cut after %d writes: err = %v, want the cut", cut, err)
				}
				everySecretOwnedByItsVM(t, l.C, l.NS)

				switch then {
				case "resume":
					eventually.That(t, 30*time.Second, func() (bool, string) {
						m, err := healthy.Create(ctx, spec)
						if err != nil {
							return false, err.Error()
						}
						return m.State == providers.PowerRunning, "machine " + string(m.State) + ": " + m.Progress
					})
					vm := &kubevirtv1.VirtualMachine{}
					if err := l.C.Get(ctx, client.ObjectKey{Namespace: l.NS, Name: name}, vm); err != nil {
						t.Fatal(err)
					}
					if rs := vm.Spec.RunStrategy; rs == nil || *rs != kubevirtv1.RunStrategyAlways {
						t.Errorf("run strategy %v after the start, want the template's Always", rs)
					}
					if _, held := vm.Annotations[kubevirt.AnnotationStartStrategy]; held {
						t.Errorf("annotation %s still on the started VM", kubevirt.AnnotationStartStrategy)
					}
					secret := &corev1.Secret{}
					if err := l.C.Get(ctx, client.ObjectKey{Namespace: l.NS, Name: name + "-cloudinit"}, secret); err != nil {
						t.Fatalf("the started VM's cloud-init Secret: %v", err)
					}
					if string(secret.Data[kubevirt.UserDataKey]) != spec.CloudInit.UserData {
						t.Errorf("the Secret does not hold the machine's user data")
					}
					everySecretOwnedByItsVM(t, l.C, l.NS)
				}
				eventually.That(t, 30*time.Second, func() (bool, string) {
					err := healthy.Delete(ctx, spec.Ref, spec.Owner)
					if err != nil {
						return false, err.Error()
					}
					return true, ""
				})
				for _, obj := range []client.Object{
					&kubevirtv1.VirtualMachine{}, &corev1.Secret{},
				} {
					n := name
					if _, ok := obj.(*corev1.Secret); ok {
						n += "-cloudinit"
					}
					if err := l.C.Get(ctx, client.ObjectKey{Namespace: l.NS, Name: n}, obj); !apierrors.IsNotFound(err) {
						t.Errorf("%T %s left after Delete (err %v)", obj, n, err)
					}
				}
			})
		}
	}
}

// everySecretOwnedByItsVM checks the namespace's cloud-init Secrets: each is
// owned by a VirtualMachine that exists, with the same UID.
func everySecretOwnedByItsVM(t *testing.T, c client.Client, ns string) {
	t.Helper()
	var secrets corev1.SecretList
	if err := c.List(context.Background(), &secrets, client.InNamespace(ns), client.MatchingLabels{kubevirt.LabelOwnerKind: "CutTest"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "VirtualMachine" {
			t.Errorf("Secret %s has owners %v, want exactly its VirtualMachine", s.Name, s.OwnerReferences)
			continue
		}
		vm := &kubevirtv1.VirtualMachine{}
		ref := s.OwnerReferences[0]
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ref.Name}, vm); err != nil || vm.UID != ref.UID {
			t.Errorf("Secret %s is owned by VirtualMachine %s (%s), which is not there (err %v)", s.Name, ref.Name, ref.UID, err)
		}
	}
}
