// Command control-plane is the local dev cluster's seven programs in one binary: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and kwokctl.
//
// Why one binary: a cold build links once instead of seven times (each link of a
// Kubernetes command reads and writes most of the same ~100 MB of packages), and a package
// two commands share is compiled once at one version. hack/build-binaries.sh builds it and
// hard-links it under each program's name; the name a process was started as picks the
// program (what hyperkube and k3s do). Hard links, not symlinks: a running process's
// /proc/<pid>/exe then still names its program, which the dev cluster's clean-up reads.
//
// kwokctl starts the programs through symlinks in its cluster directory, and names the kwok
// controller's "kwok-controller": that name runs kwok. Each entry below is the body of the
// program's own main package at the pinned versions (k8s.io/kubernetes/cmd/...,
// sigs.k8s.io/kwok/cmd/..., go.etcd.io/etcd/server/v3); kwokctl gets only the binary
// runtime, the one the dev cluster uses (no docker, podman, nerdctl or kind here).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // for CronJob time zones (kube-apiserver's and kube-controller-manager's main)

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwokctlcmd "sigs.k8s.io/kwok/pkg/kwokctl/cmd"
	_ "sigs.k8s.io/kwok/pkg/kwokctl/runtime/binary"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

var programs = map[string]func(){
	"etcd":                    func() { etcdmain.Main(os.Args) },
	"kube-apiserver":          func() { os.Exit(cli.Run(apiserver.NewAPIServerCommand())) },
	"kube-controller-manager": func() { os.Exit(cli.Run(controllermanager.NewControllerManagerCommand())) },
	"kube-scheduler":          func() { os.Exit(cli.Run(scheduler.NewSchedulerCommand())) },
	"kubectl":                 kubectl,
	"kwok":                    func() { runKwok(false) },
	"kwok-controller":         func() { runKwok(false) },
	"kwokctl":                 func() { runKwok(true) },
}

func kubectl() {
	// As kubectl's main: the verbosity is read before the command is built, so that klog
	// works while the command (plugins, .kuberc) is put together.
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
}

// runKwok is the body of kwok's and kwokctl's mains (they differ only in the command).
func runKwok(ctl bool) {
	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)
	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags", "err", err)
		os.Exit(1)
	}
	var command *cobra.Command
	if ctl {
		command = kwokctlcmd.NewCommand(ctx)
	} else {
		command = kwokcmd.NewCommand(ctx)
	}
	command.PersistentFlags().AddFlagSet(flagset)
	// cobra's own --version (a bool), made before cobra merges pflag.CommandLine into the
	// command: there, Kubernetes' verflag has put a --version that is not a bool, which cobra
	// would take as the command's and then fail every run of kwok reading it as a bool.
	command.Flags().Bool("version", false, "version for "+command.Name())
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		os.Exit(1)
	}
}

func main() {
	name := filepath.Base(os.Args[0])
	run, ok := programs[name]
	if !ok {
		// Started by another name (a copy, a test's symlink): the file it runs from decides.
		if exe, err := os.Executable(); err == nil {
			run, ok = programs[filepath.Base(exe)]
		}
	}
	if !ok {
		names := make([]string, 0, len(programs))
		for n := range programs {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "%s: run this binary as one of %s (a hard link or symlink of that name)\n",
			name, strings.Join(names, ", "))
		os.Exit(2)
	}
	run()
}
