// Package reconcilers holds one package per kind (machineclaim/, runnerpool/,
// cyberdesk/, performer/ …), each split into controller, phases and status
// files, plus small helpers they share. Reconcilers talk to outside systems
// only through providers/.
package reconcilers
