package main

import (
	"flag"
	"fmt"
	"io"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/hyperfleet/hyperfleet/internal/logging"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/version"
)

func runManager(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("hyperfleet run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kubeconfig string
		gcPercent  int
		logOpts    logging.Options
		mgrOpts    manager.Options
	)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: $KUBECONFIG, the in-cluster config, or ~/.kube/config.")
	fs.IntVar(&gcPercent, "gc-percent", defaultGCPercent, "How far the Go heap may grow past its live size before a collection (GOGC), when the GOGC variable is unset. Lower uses less memory and more CPU.")
	logOpts.BindFlags(fs, "json")
	mgrOpts.BindFlags(fs)
	log, err := parseWithLogger(fs, args, &logOpts)
	if err != nil {
		return err
	}
	if err := mgrOpts.Complete(); err != nil {
		return err
	}
	gc := setGCPercent(gcPercent)
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := manager.New(cfg, mgrOpts)
	if err != nil {
		return err
	}
	log.Info("Starting the manager", "version", version.String(), "identity", mgrOpts.Identity,
		"leaderElection", mgrOpts.LeaderElect, "leaseNamespace", mgrOpts.LeaderElectionNamespace,
		"namespaces", mgrOpts.Namespaces, "metricsAddress", mgrOpts.MetricsAddr, "gcPercent", gc)
	return mgr.Start(ctrl.SetupSignalHandler())
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = config.GetConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading the cluster configuration: %w (pass --kubeconfig, set KUBECONFIG, or run in a cluster; no cluster? try 'make dev', the sandbox)", err)
	}
	// The loaders disagree on the rate limit (clientcmd leaves client-go's
	// 5 requests a second); manager.ClientConfig settles it for every path,
	// this one included, so a flag cannot change the client's speed.
	cfg = manager.ClientConfig(cfg)
	cfg.UserAgent = "hyperfleet/" + version.String()
	return cfg, nil
}
