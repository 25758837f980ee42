package sandbox

import (
	"fmt"
	"net"
)

// freePorts returns n distinct free TCP ports on 127.0.0.1. All listeners stay
// open until every port is chosen, so the same port is never returned twice.
func freePorts(n int) ([]int, error) {
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
