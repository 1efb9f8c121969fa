package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runnerUser is the unprivileged account the runner and its jobs run as.
// The agent is root only for what needs it (installing, writing the
// runner's files, powering off); a job as root could read everything the
// VM holds, the agent's own process included.
type runnerUser struct {
	name     string
	uid, gid int
	home     string
	// switchTo: the agent runs as another user (root) and starts the
	// runner's processes as this one.
	switchTo bool
}

// lookupRunnerUser resolves spec ("runner", or "uid:gid"), creating a named
// user that does not exist yet with useradd (no password, no sudo). It
// refuses root: RUNNER_ALLOW_RUNASROOT is never set.
func lookupRunnerUser(ctx context.Context, spec string, log func(string, ...any)) (runnerUser, error) {
	u, err := parseRunnerUser(spec)
	if errors.As(err, new(user.UnknownUserError)) && os.Geteuid() == 0 {
		log("Creating the user %s the runner runs as", spec)
		cmd := exec.CommandContext(ctx, "useradd", //nolint:gosec // the user name is the operator's configuration
			"--system", "--create-home", "--user-group", "--shell", "/bin/bash", spec)
		if out, cerr := cmd.CombinedOutput(); cerr != nil {
			return u, fmt.Errorf("creating the runner's user %s with useradd (the image needs useradd, or the user made beforehand): %w: %s", spec, cerr, strings.TrimSpace(string(out)))
		}
		u, err = parseRunnerUser(spec)
	}
	if err != nil {
		return u, fmt.Errorf("the runner's user %q (runner.user, RUNNER_USER): %w", spec, err)
	}
	if u.uid == 0 {
		return u, fmt.Errorf("the runner's user %q is root: a job would run as root; name an unprivileged user", spec)
	}
	switch euid := os.Geteuid(); euid {
	case u.uid:
	case 0:
		u.switchTo = true
	default:
		return u, fmt.Errorf("the agent runs as uid %d and cannot start the runner as %s (uid %d): run it as root", euid, spec, u.uid)
	}
	return u, nil
}

func parseRunnerUser(spec string) (runnerUser, error) {
	if uidS, gidS, ok := strings.Cut(spec, ":"); ok {
		uid, err1 := strconv.Atoi(uidS)
		gid, err2 := strconv.Atoi(gidS)
		if err := errors.Join(err1, err2); err != nil {
			return runnerUser{}, fmt.Errorf("want a user name or uid:gid: %w", err)
		}
		return runnerUser{name: spec, uid: uid, gid: gid}, nil
	}
	pw, err := user.Lookup(spec)
	if err != nil {
		return runnerUser{}, err
	}
	uid, err1 := strconv.Atoi(pw.Uid)
	gid, err2 := strconv.Atoi(pw.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return runnerUser{}, err
	}
	return runnerUser{name: spec, uid: uid, gid: gid, home: pw.HomeDir}, nil
}

// own gives path to the runner's user, when the agent switches users.
func (u runnerUser) own(path string) error {
	if !u.switchTo {
		return nil
	}
	return os.Lchown(path, u.uid, u.gid)
}

// ownTree gives the runner's directory to its user: the runner writes its
// settings, logs and work folder there.
func (u runnerUser) ownTree(dir string) error {
	if !u.switchTo {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Lchown never follows a link, and the tree was just unpacked by
		// root: no other user could have planted one.
		return os.Lchown(path, u.uid, u.gid) //nolint:gosec // see above
	})
}

// apply makes cmd run as the runner's user, with its HOME and no
// supplementary groups (so none that reaches a disk or the CD-ROM).
func (u runnerUser) apply(cmd *exec.Cmd) {
	if !u.switchTo {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}, //nolint:gosec // ids from the user database or the config
	}}
}
