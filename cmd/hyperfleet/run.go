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
		return nil, fmt.Errorf("loading the cluster configuration: %w (pass --kubeconfig, set KUBECONFIG, or run in a cluster; no cluster? try 'hyperfleet dev')", err)
	}
	cfg = rest.CopyConfig(cfg)
	// clientcmd leaves QPS at 0, which client-go reads as its old default of
	// 5 requests a second; controller-runtime's loader (KUBECONFIG, in
	// cluster) turns the client-side limiter off and leaves fairness to the
	// API server's priority and fairness. A flag must not change the
	// client's speed, so both paths get the same.
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	cfg.UserAgent = "hyperfleet/" + version.String()
	return cfg, nil
}
