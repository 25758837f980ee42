package kubeletapi

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// parseLogQuery reads the query of a kubelet container log request, the
// parameters of pods/log the API server passes on: follow, previous,
// timestamps, tailLines (0 is no line), limitBytes, sinceSeconds and
// sinceTime (not both). Anything malformed is an error.
func parseLogQuery(q url.Values) (*corev1.PodLogOptions, error) {
	opts := &corev1.PodLogOptions{}
	bools := map[string]*bool{"follow": &opts.Follow, "previous": &opts.Previous, "timestamps": &opts.Timestamps}
	for k, dst := range bools {
		if v := q.Get(k); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q is not a boolean", k, v)
			}
			*dst = b
		}
	}
	ints := []struct {
		key string
		dst **int64
		min int64
	}{{"tailLines", &opts.TailLines, 0}, {"limitBytes", &opts.LimitBytes, 1}, {"sinceSeconds", &opts.SinceSeconds, 1}}
	for _, i := range ints {
		v := q.Get(i.key)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < i.min {
			return nil, fmt.Errorf("%s=%q: want an integer of at least %d", i.key, v, i.min)
		}
		*i.dst = &n
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("sinceTime=%q is not an RFC 3339 time", v)
		}
		opts.SinceTime = &metav1.Time{Time: t}
	}
	if opts.SinceSeconds != nil && opts.SinceTime != nil {
		return nil, fmt.Errorf("sinceSeconds and sinceTime cannot both be set")
	}
	return opts, nil
}
