package sandbox

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// portFloor is the lowest port the sandbox takes: above the well-known
// and registered services a developer's machine may run (and the
// kubelet API's 10250).
const portFloor = 20000

// freePorts returns n distinct free TCP ports on 127.0.0.1, below the
// kernel's ephemeral range. A cluster restarted (sandbox start, the outage
// scenarios) binds its ports again; a port from the ephemeral range may
// meanwhile have been given to any process's outgoing connection or to a
// listener on port 0 (seen: a restarted cluster-1's kube-apiserver found
// its port taken by an HTTP server). Below that range only a listener
// that names the port can take it. The scan starts at a random port, so
// that sandboxes started together rarely try the same ones. All listeners
// stay open until every port is chosen, so the same port is never
// returned twice.
func freePorts(n int) ([]int, error) {
	lo, hi := portFloor, ephemeralLow()
	if hi-lo < 4*n {
		return anyFreePorts(n)
	}
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	start := rand.IntN(hi - lo)
	for i := 0; i < hi-lo && len(ports) < n; i++ {
		p := lo + (start+i)%(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("choosing %d free ports between %d and %d: only %d free", n, lo, hi, len(ports))
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return lo
}

// anyFreePorts lets the kernel choose, where no range below the ephemeral
// one is left.
func anyFreePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choosing a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portsPerCluster is how many ports one cluster needs (the fields of Ports).
const portsPerCluster = 16

func portsFrom(p []int) Ports {
	return Ports{EtcdClient: p[0], EtcdPeer: p[1], APIServer: p[2], ControllerManager: p[3], Scheduler: p[4],
		FleetletMetrics: p[5], FleetletHealth: p[6], KwokServer: p[7], FleetletWebhook: p[8], FleetletScheduler: p[9],
		StandbyMetrics: p[10], StandbyHealth: p[11], KueueWebhook: p[12], KueueMetrics: p[13], KueueHealth: p[14],
		MetricsServer: p[15]}
}
