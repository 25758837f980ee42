package kubeletapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	utilexec "k8s.io/utils/exec"
)

// exec runs cmd in a container of the delegate (pods/exec) with the
// caller's streams. A command that exits non-zero returns the remote
// command's exit error, which the kubelet protocol hands back as its code.
func (h *nodeHandlers) exec(ctx context.Context, namespace, name, container string, cmd []string, io api.AttachIO) error {
	return h.stream(ctx, namespace, name, "exec", io, func(s streamFlags) runtime.Object {
		return &corev1.PodExecOptions{Container: container, Command: cmd, Stdin: s.stdin, Stdout: s.stdout, Stderr: s.stderr, TTY: s.tty}
	})
}

// attach attaches the caller's streams to a container of the delegate
// (pods/attach).
func (h *nodeHandlers) attach(ctx context.Context, namespace, name, container string, io api.AttachIO) error {
	return h.stream(ctx, namespace, name, "attach", io, func(s streamFlags) runtime.Object {
		return &corev1.PodAttachOptions{Container: container, Stdin: s.stdin, Stdout: s.stdout, Stderr: s.stderr, TTY: s.tty}
	})
}

type streamFlags struct{ stdin, stdout, stderr, tty bool }

func (h *nodeHandlers) stream(ctx context.Context, namespace, name, subresource string, io api.AttachIO, options func(streamFlags) runtime.Object) error {
	d, err := h.delegateOf(ctx, namespace, name)
	if err != nil {
		return err
	}
	flags := streamFlags{stdin: io.Stdin() != nil, stdout: io.Stdout() != nil, stderr: io.Stderr() != nil && !io.TTY(), tty: io.TTY()}
	u, err := podURL(d, subresource, options(flags))
	if err != nil {
		return err
	}
	ex, err := executor(d.config, u)
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Tty: flags.tty}
	if flags.stdin {
		opts.Stdin = io.Stdin()
	}
	if flags.stdout {
		opts.Stdout = io.Stdout()
	}
	if flags.stderr {
		opts.Stderr = io.Stderr()
	}
	if flags.tty {
		opts.TerminalSizeQueue = sizeQueue{ctx: ctx, sizes: io.Resize()}
	}
	err = ex.StreamWithContext(ctx, opts)
	if exit := utilexec.ExitError(nil); errors.As(err, &exit) {
		return err // the command's exit code, handed back as is
	}
	return targetError(d, err)
}

// podURL is the URL of a subresource of the delegate with options.
func podURL(d delegate, subresource string, options runtime.Object) (*url.URL, error) {
	c, err := d.clientset()
	if err != nil {
		return nil, err
	}
	return c.CoreV1().RESTClient().Post().Namespace(d.namespace).Resource("pods").Name(d.name).
		SubResource(subresource).VersionedParams(options, scheme.ParameterCodec).URL(), nil
}

// executor talks WebSocket to the target's API server and falls back to
// SPDY when it cannot upgrade, as kubectl does.
func executor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// sizeQueue hands the caller's terminal resizes to the target.
type sizeQueue struct {
	ctx   context.Context
	sizes <-chan api.TermSize
}

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case <-q.ctx.Done():
		return nil
	case s, ok := <-q.sizes:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	}
}
