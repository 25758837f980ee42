package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one program the sandbox started, as recorded in sandbox.json.
type Process struct {
	// Component names what runs, for example "kube-apiserver".
	Component string `json:"component"`
	// PID is the operating system's process ID.
	PID int `json:"pid"`
	// StartTime is the process start time in clock ticks after boot, read from
	// /proc/<pid>/stat. Together with PID it identifies the process, so a PID
	// reused by an unrelated program is never signalled.
	StartTime uint64 `json:"startTime"`
	// Log is the file that holds the process's standard output and error.
	Log string `json:"log"`
}

// processSpec says how to start one component.
type processSpec struct {
	component string
	binary    string
	args      []string
	log       string
	// env is added to this program's environment for the process.
	env []string
	// dieWithParent asks the kernel to kill the process when the process that
	// started it exits: tests set it so that a test binary killed by its
	// timeout leaves nothing behind. The command-line tool leaves it unset so
	// that the sandbox outlives the `up` command.
	dieWithParent bool
}

// running is a process this very program started: Wait is called on it so
// that it never lingers as a zombie, and done closes when it exits.
type running struct {
	Process
	done chan struct{}
	err  error
}

// startProcess starts spec in its own session, its output appended to its log.
func startProcess(spec processSpec) (*running, error) {
	logFile, err := os.OpenFile(spec.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: opening log: %w", spec.component, err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n=== %s starting %s %s\n", time.Now().Format(time.RFC3339), spec.binary, strings.Join(spec.args, " "))

	cmd := exec.Command(spec.binary, spec.args...)
	if len(spec.env) > 0 {
		cmd.Env = append(os.Environ(), spec.env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if spec.dieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: starting %s: %w", spec.component, spec.binary, err)
	}
	r := &running{
		Process: Process{Component: spec.component, PID: cmd.Process.Pid, Log: spec.log},
		done:    make(chan struct{}),
	}
	r.StartTime, _ = processStartTime(r.PID)
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

// exited reports whether the process has ended, and how.
func (r *running) exited() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// processStartTime reads field 22 (starttime) of /proc/<pid>/stat.
func processStartTime(pid int) (uint64, error) {
	fields, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// procStat returns the fields of /proc/<pid>/stat after the command name, so
// fields[0] is the state (field 3 in proc(5)).
func procStat(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name is in parentheses and may itself hold spaces or ')'.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return fields, nil
}

// Alive reports whether the recorded process still runs: the PID exists, it
// is the same process (same start time) and it is not a zombie.
func (p Process) Alive() bool {
	if p.PID <= 0 {
		return false
	}
	fields, err := procStat(p.PID)
	if err != nil {
		return false
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return false
	}
	if p.StartTime == 0 {
		return true
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	return err == nil && start == p.StartTime
}

// apiServerStopGrace caps the SIGTERM grace of a kube-apiserver. On SIGTERM it
// closes its listener and then waits up to its request timeout (a minute)
// for requests still in flight, such as a call proxied to a webhook or an
// aggregated API whose server is already gone, so a whole grace period was
// spent on nearly every cluster stop in the e2e suite. It keeps no state of
// its own (etcd does, and is stopped after it with the full grace), so
// cutting that wait short loses nothing; an outage ends it the same way.
const apiServerStopGrace = 2 * time.Second

// stopGrace is the grace a component gets between SIGTERM and SIGKILL.
func stopGrace(component string, grace time.Duration) time.Duration {
	if component == binAPIServer {
		return min(grace, apiServerStopGrace)
	}
	return grace
}

// stopProcess sends SIGTERM, waits up to grace for the process to end, then
// sends SIGKILL; with no grace, SIGKILL at once. A process that is already
// gone is not an error.
func stopProcess(p Process, grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if grace > 0 {
		if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%s (pid %d): %w", p.Component, p.PID, err)
		}
		// A paused process (PauseComponent) handles it only once it runs.
		_ = syscall.Kill(p.PID, syscall.SIGCONT)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.Alive() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s (pid %d): %w", p.Component, p.PID, err)
	}
	for i := 0; i < 100 && p.Alive(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if p.Alive() {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Component, p.PID)
	}
	return nil
}

// tailFile returns at most the last n lines of a file, for error messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
