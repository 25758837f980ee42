package testenv

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Served sums apiserver_request_total over the control planes of cfgs by
// "VERB resource/subresource" (for example "GET pods/", "PATCH
// podchaperons/status"), every client together. WATCH, leases,
// clustersummaries (the targets' heartbeats and probes, whose rate does
// not depend on the pods) and non-resource requests (reading /metrics
// itself) are left out. Two calls around a step give what the step cost.
func Served(t TB, cfgs ...*rest.Config) map[string]int64 {
	t.Helper()
	by := map[string]int64{}
	for _, cfg := range cfgs {
		if err := servedBy(cfg, by); err != nil {
			t.Fatalf("reading apiserver_request_total of %s: %v", cfg.Host, err)
		}
	}
	return by
}

func servedBy(cfg *rest.Config, by map[string]int64) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return err
	}
	f := fams["apiserver_request_total"]
	if f == nil {
		return fmt.Errorf("no apiserver_request_total")
	}
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["verb"] == "WATCH" || l["resource"] == "leases" || l["resource"] == "clustersummaries" || l["resource"] == "" {
			continue
		}
		by[l["verb"]+" "+l["resource"]+"/"+l["subresource"]] += int64(m.GetCounter().GetValue())
	}
	return nil
}
