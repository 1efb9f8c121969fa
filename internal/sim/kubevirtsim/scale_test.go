package kubevirtsim

import (
	"fmt"
	"sync"
	"testing"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// A hundred VMs started at once all run, each with its own address, spread
// over the nodes; deleted at once, they all go. Not parallel, so the
// counters are this test's alone.
func TestHundredVMs(t *testing.T) {
	const n = 100
	ns := testenv.Namespace(t)
	c := testenv.Client()
	before := sim.Stats()
	start := time.Now()

	createAll(t, n, func(i int) client.Object {
		return newVM(ns, fmt.Sprintf("vm-%03d", i), kubevirtv1.RunStrategyAlways)
	})
	var vmis kubevirtv1.VirtualMachineInstanceList
	eventually.That(t, 2*timeout, func() (bool, string) {
		if err := c.List(ctxT(t), &vmis, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range vmis.Items {
			if ok, _ := vmiReadyWithIP(&vmis.Items[i]); ok {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d VMIs running with an address", ready, n)
	})
	t.Logf("%d VMs running and booted in %s", n, time.Since(start).Round(time.Millisecond))

	ips := map[string]string{}
	perNode := map[string]int{}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		ip := vmi.Status.Interfaces[0].IP
		if other, dup := ips[ip]; dup {
			t.Errorf("VMIs %s and %s share the address %s", other, vmi.Name, ip)
		}
		ips[ip] = vmi.Name
		perNode[vmi.Status.NodeName]++
	}
	for _, node := range sim.opts.Nodes {
		if perNode[node] < n/len(sim.opts.Nodes)-1 {
			t.Errorf("placement %v is not balanced over %v", perNode, sim.opts.Nodes)
			break
		}
	}
	eventually.That(t, timeout, func() (bool, string) {
		var vms kubevirtv1.VirtualMachineList
		if err := c.List(ctxT(t), &vms, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range vms.Items {
			if ok, _ := vmRunningReady(&vms.Items[i]); ok {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d VMs Running and ready", ready, n)
	})
	if got := sim.Stats(); got.VMIsCreated-before.VMIsCreated != n || got.Booted-before.Booted != n {
		t.Errorf("stats: %d VMIs created, %d booted, want %d each", got.VMIsCreated-before.VMIsCreated, got.Booted-before.Booted, n)
	}

	start = time.Now()
	var vms kubevirtv1.VirtualMachineList
	if err := c.List(ctxT(t), &vms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range vms.Items {
		wg.Add(1)
		go func(vm *kubevirtv1.VirtualMachine) {
			defer wg.Done()
			if err := c.Delete(ctxT(t), vm); err != nil {
				errs <- err
			}
		}(&vms.Items[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually.That(t, 2*timeout, func() (bool, string) {
		var left kubevirtv1.VirtualMachineList
		var leftVMIs kubevirtv1.VirtualMachineInstanceList
		if err := c.List(ctxT(t), &left, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		if err := c.List(ctxT(t), &leftVMIs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return len(left.Items)+len(leftVMIs.Items) == 0, fmt.Sprintf("%d VMs and %d VMIs left", len(left.Items), len(leftVMIs.Items))
	})
	t.Logf("%d VMs shut down and deleted in %s", n, time.Since(start).Round(time.Millisecond))
	if got := sim.Stats(); got.VMIsDeleted-before.VMIsDeleted != n {
		t.Errorf("stats: %d VMIs deleted, want %d", got.VMIsDeleted-before.VMIsDeleted, n)
	}
}

// createAll creates n objects with a few clients in parallel, as a burst of
// users or an operator scaling up would.
func createAll(t *testing.T, n int, obj func(int) client.Object) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := testenv.Client().Create(ctxT(t), obj(i)); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
