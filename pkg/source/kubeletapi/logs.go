package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// logsPrefix is the kubelet's container log path:
// /containerLogs/<namespace>/<pod>/<container>.
const logsPrefix = "/containerLogs/"

// serveLogs serves a container's log as a kubelet does (tailLines=0 is no
// line), streamed from the delegate.
func (h *nodeHandlers) serveLogs(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, logsPrefix), "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		http.Error(w, fmt.Sprintf("%s: want %snamespace/pod/container", r.URL.Path, logsPrefix), http.StatusNotFound)
		return
	}
	opts, err := parseLogQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	opts.Container = parts[2]
	rc, err := h.logs(r.Context(), parts[0], parts[1], opts)
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush() // -f shows each line as it comes
			}
		}
		if err != nil {
			return
		}
	}
}

// logs streams a container's log from the delegate (pods/log).
func (h *nodeHandlers) logs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	d, err := h.delegateOf(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	cs, err := d.clientset()
	if err != nil {
		return nil, err
	}
	rc, err := cs.CoreV1().Pods(d.namespace).GetLogs(d.name, opts).Stream(ctx)
	return rc, targetError(d, err)
}

// writeError answers err as a kubelet would: 404 for a pod or container it
// does not have, 400 for a bad request, else 500, each with the message.
func writeError(ctx context.Context, w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errdefs.IsNotFound(err):
		code = http.StatusNotFound
	case errdefs.IsInvalidInput(err):
		code = http.StatusBadRequest
	}
	var unreachable *unreachableError
	if errors.As(err, &unreachable) {
		code = http.StatusServiceUnavailable
	}
	if code >= 500 {
		ctrllog.FromContext(ctx).Error(err, "Kubelet API request failed")
	}
	http.Error(w, err.Error(), code)
}
