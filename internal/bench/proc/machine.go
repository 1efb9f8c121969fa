package proc

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// tick is one clock tick of /proc's CPU counters: USER_HZ is 100 on every
// Linux architecture the project builds for.
const tick = 10 * time.Millisecond

// Machine is a snapshot of where the machine's CPU time went: the whole
// machine's counters from /proc/stat and every running process's from
// /proc/<pid>/stat, by pid. Two snapshots around a burst say
// whether the cores were saturated and which processes used them — the
// reading that tells a benchmark's bound (the API server and etcd on 2
// cores, say) from the operator's own cost.
type Machine struct {
	at                time.Time
	busy, idle, steal time.Duration
	byPid             map[int]pidCPU
}

// pidCPU is one process's command and CPU time so far.
type pidCPU struct {
	command string
	cpu     time.Duration
}

// ReadMachine takes a snapshot now. Processes that vanish while it reads
// are skipped: a snapshot is a reading, not an inventory.
func ReadMachine() (Machine, error) {
	m := Machine{at: time.Now(), byPid: map[int]pidCPU{}}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m, err
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return m, fmt.Errorf("unexpected first line of /proc/stat: %q", line)
	}
	// user nice system idle iowait irq softirq steal: idle and iowait are
	// the cores waiting; steal is time the hypervisor gave to other guests.
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return m, err
		}
		switch d := time.Duration(n) * tick; i {
		case 3, 4:
			m.idle += d
		case 7:
			m.steal += d
		default:
			m.busy += d
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return m, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, cpu, err := readStat(pid)
		if err != nil {
			continue
		}
		m.byPid[pid] = pidCPU{command: command(name), cpu: cpu}
	}
	return m, nil
}

// Usage is what happened between two snapshots.
type Usage struct {
	Wall time.Duration
	// Busy is the share of the machine's cores that ran something, from 0
	// to 1; Steal the share the hypervisor took for other guests.
	Busy, Steal float64
	// ByCommand is the CPU time each command name used, largest first;
	// processes that started and ended in between are not in it. Kernel
	// threads are summed by kind ("kworker" for every kworker/1:0-…).
	ByCommand []CommandCPU
}

// CommandCPU is one command name's CPU time.
type CommandCPU struct {
	Command string
	CPU     time.Duration
}

// Since is the usage from before to m.
func (m Machine) Since(before Machine) Usage {
	u := Usage{Wall: m.at.Sub(before.at)}
	busy, idle, steal := m.busy-before.busy, m.idle-before.idle, m.steal-before.steal
	if total := busy + idle + steal; total > 0 {
		u.Busy, u.Steal = float64(busy)/float64(total), float64(steal)/float64(total)
	}
	// By pid, then summed by command: a kernel worker's name changes with
	// the work it does, a pid's does not.
	byCommand := map[string]time.Duration{}
	for pid, now := range m.byPid {
		d := now.cpu
		if was, ok := before.byPid[pid]; ok && was.cpu <= now.cpu {
			d -= was.cpu
		} // else started since, or a reused pid: all of it is new
		byCommand[now.command] += d
	}
	for name, cpu := range byCommand {
		if cpu > 0 {
			u.ByCommand = append(u.ByCommand, CommandCPU{Command: name, CPU: cpu})
		}
	}
	sort.Slice(u.ByCommand, func(i, j int) bool {
		if u.ByCommand[i].CPU != u.ByCommand[j].CPU {
			return u.ByCommand[i].CPU > u.ByCommand[j].CPU
		}
		return u.ByCommand[i].Command < u.ByCommand[j].Command
	})
	return u
}

// String reads "cores 97% busy (steal 1%); kube-apiserver 5.2 s, etcd
// 1.7 s, …", the commands that used at least 0.1 s.
func (u Usage) String() string {
	parts := []string{}
	for _, c := range u.ByCommand {
		if c.CPU >= 100*time.Millisecond {
			parts = append(parts, fmt.Sprintf("%s %.1f s", c.Command, c.CPU.Seconds()))
		}
	}
	return fmt.Sprintf("cores %.0f%% busy (steal %.0f%%) over %.1f s; by process: %s",
		100*u.Busy, 100*u.Steal, u.Wall.Seconds(), strings.Join(parts, ", "))
}

// command is the name a process's CPU is reported under: a kernel
// thread's kind (the part before its '/'), else its command name.
func command(name string) string {
	kind, _, _ := strings.Cut(name, "/")
	return kind
}

// readStat reads a process's command name and CPU time, user and system,
// from /proc/<pid>/stat (fields 2, 14 and 15).
func readStat(pid int) (string, time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)) //nolint:gosec // a pid from /proc, not input
	if err != nil {
		return "", 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses; the fields after it start past the last ')'.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return "", 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 13 {
		return "", 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15 overall
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", 0, err
		}
		ticks += n
	}
	return string(b[open+1 : end]), time.Duration(ticks) * tick, nil
}

// PidWithArg is the running process one of whose arguments is arg, exactly:
// a process the benchmark did not start itself but can tell by a flag
// unique to it (kube-apiserver's --audit-log-path, say).
func PidWithArg(arg string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process with argument %q", arg)
}

// CPUOf is the CPU time, user and system, that process pid has used.
func CPUOf(pid int) (time.Duration, error) {
	_, cpu, err := readStat(pid)
	return cpu, err
}
