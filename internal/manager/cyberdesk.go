//go:build !hourglass

package manager

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/providers/supabase"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/cyberdesk"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// CyberdeskOptions configure the Cyberdesk reconciler.
type CyberdeskOptions struct {
	// TemplateConfigMap (in the operator's namespace) and TemplateKey hold
	// the desks' VirtualMachine template.
	TemplateConfigMap string
	TemplateKey       string
	// ManagedBy fills the template's ${managed_by}.
	ManagedBy string
	// SupabaseSecret names a Secret in the operator's namespace with the
	// Supabase URL and key; empty turns the status export off.
	SupabaseSecret  string
	SupabaseTimeout time.Duration
	// Clock drives the desks' timeoutMs; nil is the real clock. Tests set
	// a fake and step it past an expiry instead of waiting it out.
	Clock clock.Clock
	// Standby: hot desk machines kept per namespace.
	Standby cyberdesk.Standby
}

func (o *CyberdeskOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.TemplateConfigMap, "cyberdesk-template-configmap", "cyberdesk-vm-template", "ConfigMap in the operator's namespace holding the Cyberdesk VirtualMachine template; read for every new desk, so edits apply to the next one.")
	fs.StringVar(&o.TemplateKey, "cyberdesk-template-key", "", "Key of the template in that ConfigMap. Default: template.yaml, or the ConfigMap's only key.")
	fs.StringVar(&o.ManagedBy, "cyberdesk-managed-by", "hyperfleet", "Value of ${managed_by} in the Cyberdesk template.")
	fs.StringVar(&o.SupabaseSecret, "cyberdesk-supabase-secret", "", "Secret in the operator's namespace with keys url and key (or SUPABASE_URL and SUPABASE_KEY); when set, every desk's status is upserted into Supabase's cyberdesk_instances table.")
	fs.DurationVar(&o.SupabaseTimeout, "cyberdesk-supabase-timeout", 30*time.Second, "HTTP timeout of one Supabase request.")
	fs.Func("cyberdesk-standby", "Comma-separated namespace=count: hot desk machines kept booted in each namespace, for desks with no userData of their own to take at once (docs/standby.md). Default: none.", func(v string) error {
		hot, err := parseDeskStandby(v)
		o.Standby.Hot = hot
		return err
	})
	fs.DurationVar(&o.Standby.MaxAge, "cyberdesk-standby-max-age", standby.DefaultMaxAge, "Age at which a hot desk machine no desk took is replaced, so template edits reach them.")
}

// parseDeskStandby reads --cyberdesk-standby: namespace=count pairs.
func parseDeskStandby(v string) (map[string]int32, error) {
	hot := map[string]int32{}
	for _, pair := range splitList(v) {
		ns, count, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not namespace=count", pair)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		n, err := strconv.ParseInt(count, 10, 32)
		if err != nil || n < 0 || n > standby.MaxHot {
			return nil, fmt.Errorf("namespace %s: count %q must be a whole number from 0 to %d", ns, count, standby.MaxHot)
		}
		if _, dup := hot[ns]; dup {
			return nil, fmt.Errorf("namespace %s is listed twice", ns)
		}
		hot[ns] = int32(n)
	}
	return hot, nil
}

// complete checks the desk standby against the watched namespaces: the
// operator can keep machines only where it watches.
func (o *CyberdeskOptions) complete(watched []string) error {
	if o.Standby.MaxAge != 0 && o.Standby.MaxAge < 10*time.Minute {
		return fmt.Errorf("--cyberdesk-standby-max-age %s: at least 10m, or hot desk machines are replaced before they are used", o.Standby.MaxAge)
	}
	if len(watched) == 0 {
		return nil
	}
	for ns := range o.Standby.Hot {
		if !slices.Contains(watched, ns) {
			return fmt.Errorf("--cyberdesk-standby names namespace %s, which is not in --namespaces: the operator can keep hot desk machines only in namespaces it watches", ns)
		}
	}
	return nil
}

// SetupCyberdesk registers the Cyberdesk reconciler on mgr with what its
// desks need, the MachineClaim reconciler (with the desk Source) and the
// orphan sweeper, wired as New wires them among the others: for the
// Cyberdesk suite, which tests the desks (template, Supabase export,
// restarts) without the other kinds' reconcilers running beside them.
func SetupCyberdesk(mgr ctrl.Manager, o Options) error {
	var err error
	if o.InstallationID, err = resolveInstallation(context.Background(), mgr.GetAPIReader(), o, mgr.GetLogger()); err != nil {
		return err
	}
	o.Controllers = []string{ControllerMachineClaim, ControllerOrphans, ControllerCyberdesk}
	return setupReconcilers(mgr, o)
}

// deskSource is the operator's own KubeVirt as the desks' claims use it:
// the provider their machines are made through, and the Source that makes
// each desk's claim from the template ConfigMap.
func deskSource(mgr ctrl.Manager, o Options) (*cyberdesk.Source, *kubevirt.Provider, error) {
	c := o.Cyberdesk
	if c.TemplateConfigMap == "" {
		c.TemplateConfigMap = "cyberdesk-vm-template"
	}
	provider, err := kubevirt.New(kubevirt.Config{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), OwnerKind: cyberdesk.OwnerKind, ManagedBy: c.ManagedBy,
		Installation: o.InstallationID,
	})
	if err != nil {
		return nil, nil, err
	}
	return &cyberdesk.Source{
		Reader: mgr.GetClient(), Provider: provider,
		TemplateConfigMap: types.NamespacedName{Namespace: o.OperatorNamespace, Name: c.TemplateConfigMap},
		TemplateKey:       c.TemplateKey,
		Standby:           c.Standby,
	}, provider, nil
}

// setupCyberdesk registers the Cyberdesk reconciler and the Supabase
// exporter when configured.
func setupCyberdesk(mgr ctrl.Manager, o Options, creds *credentials.Reader, adopter providers.OwnerChanger) error {
	c := o.Cyberdesk
	log := mgr.GetLogger().WithName("cyberdesk")
	served, err := kubeVirtServed(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	if !served {
		log.Info("The cluster serves no kubevirt.io/v1 VirtualMachineInstance; Cyberdesks' claims will report KubeVirtNotInstalled until KubeVirt is installed")
	}
	r := &cyberdesk.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Adopter: adopter,
		Recorder:            mgr.GetEventRecorder("cyberdesk"),
		FinalizationTimeout: o.FinalizationTimeout, Clock: c.Clock,
		MaxConcurrentReconciles: o.Workers.For(WorkersCyberdesk),
		Standby:                 c.Standby,
	}
	if c.SupabaseSecret != "" {
		exporter := &supabase.Exporter{
			Credentials: supabaseCredentials(creds, types.NamespacedName{Namespace: o.OperatorNamespace, Name: c.SupabaseSecret}),
			HTTPClient:  supabase.NewHTTPClient(c.SupabaseTimeout),
			Log:         log.WithName("supabase"),
		}
		if err := mgr.Add(exporter); err != nil {
			return err
		}
		r.Exporter = exporter
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	keeper := &cyberdesk.StandbyKeeper{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("cyberdesk-standby"), Standby: c.Standby}
	return keeper.SetupWithManager(mgr)
}

// kubeVirtServed reports whether the API server serves KubeVirt's
// VirtualMachineInstances (and so its VirtualMachines).
func kubeVirtServed(mapper apimeta.RESTMapper) (bool, error) {
	gvk := kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachineInstance")
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case apimeta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("looking up KubeVirt's API: %w", err)
}

// supabaseCredentials reads the Supabase Secret through the shared
// credentials reader (it needs no credentials label: a flag names it, not a
// spec), whose short reuse lets a rotated key be picked up.
func supabaseCredentials(reader *credentials.Reader, key types.NamespacedName) supabase.CredentialsFunc {
	return func(ctx context.Context) (supabase.Credentials, bool, error) {
		s, err := reader.OperatorSecret(ctx, key, "--cyberdesk-supabase-secret")
		if err != nil {
			if p, ok := providers.IsPermanent(err); ok && p.Reason == meta.SecretNotFoundReason {
				return supabase.Credentials{}, false, fmt.Errorf("the Supabase Secret %s does not exist; create it or unset --cyberdesk-supabase-secret", key)
			}
			return supabase.Credentials{}, false, fmt.Errorf("reading the Supabase Secret %s: %w", key, err)
		}
		get := func(names ...string) string {
			for _, n := range names {
				if v := strings.TrimSpace(string(s.Data[n])); v != "" {
					return v
				}
			}
			return ""
		}
		creds := supabase.Credentials{URL: get("url", "SUPABASE_URL"), Key: get("key", "SUPABASE_KEY")}
		if creds.URL == "" || creds.Key == "" {
			return supabase.Credentials{}, false, fmt.Errorf("the Supabase Secret %s needs the keys url and key (or SUPABASE_URL and SUPABASE_KEY)", key)
		}
		return creds, true, nil
	}
}
