package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// portForward carries one forwarded connection, stream, to port of the
// delegate, over its own SPDY connection to the target's pods/portforward.
func (h *nodeHandlers) portForward(ctx context.Context, namespace, name string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	d, err := h.delegateOf(ctx, namespace, name)
	if err != nil {
		return err
	}
	c, err := d.clientset()
	if err != nil {
		return err
	}
	u := c.CoreV1().RESTClient().Post().Namespace(d.namespace).Resource("pods").Name(d.name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(d.config)
	if err != nil {
		return err
	}
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return targetError(d, err)
	}
	defer conn.Close()

	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("%s: creating the error stream: %w", d, err)
	}
	errorStream.Close() // nothing is written to it
	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errorStream)
		switch {
		case err != nil:
			remoteErr <- err
		case len(msg) > 0:
			remoteErr <- errors.New(string(msg))
		default:
			remoteErr <- nil
		}
	}()

	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("%s: creating the data stream: %w", d, err)
	}
	fromRemote := make(chan struct{})
	go func() {
		defer close(fromRemote)
		_, _ = io.Copy(stream, data)
	}()
	go func() {
		defer data.Close() // no more data to send
		_, _ = io.Copy(data, stream)
	}()
	select {
	case <-fromRemote:
	case <-ctx.Done():
	}
	_ = data.Reset()
	select {
	case err := <-remoteErr:
		if err != nil {
			return fmt.Errorf("%s: forwarding port %d: %w", d, port, err)
		}
	case <-ctx.Done():
	}
	return nil
}
