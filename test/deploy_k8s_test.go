package test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/omniserve/omniserve/internal/metrics"
)

// The manifests are checked offline by decoding each document strictly into the upstream Go
// types the API server's schemas are generated from: k8s.io/api for the Deployment, Service and
// HPA, prometheus-operator's monitoring/v1 for the PodMonitor. sigs.k8s.io/yaml's
// UnmarshalStrict fails on an unknown or misspelt field, a value of the wrong type (a string
// where an integer goes, an invalid resource quantity) and a duplicate key, as
// `kubectl apply --validate=strict` would. What only the API server checks (name formats,
// CRD pattern rules) is not covered; the test adds the checks that matter for omniserve.

// manifestScheme knows the kinds deploy/k8s may use; any other apiVersion/kind fails.
func manifestScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme,
		autoscalingv2.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build manifest scheme: %w", err)
		}
	}
	return s, nil
}

// decodeManifests splits a multi-document YAML file as kubectl does and decodes each document
// strictly into the upstream type its apiVersion and kind name. Empty documents are skipped.
func decodeManifests(s *runtime.Scheme, data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err == nil && string(j) == "null" {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: read apiVersion and kind: %w", i, err)
		}
		gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
		obj, err := s.New(gvk)
		if err != nil {
			return nil, fmt.Errorf("document %d: no upstream type for %q %q: %w", i, tm.APIVersion, tm.Kind, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, gvk.Kind, err)
		}
		out = append(out, obj)
	}
}

// k8sManifests is what TestK8sManifests checks, one object of each kind.
type k8sManifests struct {
	dep *appsv1.Deployment
	svc *corev1.Service
	hpa *autoscalingv2.HorizontalPodAutoscaler
	pm  *monitoringv1.PodMonitor
}

func loadK8sManifests(t *testing.T) k8sManifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "k8s", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	s, err := manifestScheme()
	require.NoError(t, err)
	var m k8sManifests
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		objs, err := decodeManifests(s, data)
		require.NoError(t, err, f)
		for _, o := range objs {
			kind := o.GetObjectKind().GroupVersionKind().Kind
			require.False(t, seen[kind], "%s: a second %s", f, kind)
			seen[kind] = true
			switch o := o.(type) {
			case *appsv1.Deployment:
				m.dep = o
			case *corev1.Service:
				m.svc = o
			case *autoscalingv2.HorizontalPodAutoscaler:
				m.hpa = o
			case *monitoringv1.PodMonitor:
				m.pm = o
			}
			meta, ok := o.(metav1.Object)
			require.True(t, ok, kind)
			require.NotEmpty(t, meta.GetName(), "%s: %s without metadata.name", f, kind)
		}
	}
	require.NotNil(t, m.dep, "a Deployment")
	require.NotNil(t, m.svc, "a Service")
	require.NotNil(t, m.hpa, "a HorizontalPodAutoscaler")
	require.NotNil(t, m.pm, "a PodMonitor")
	return m
}

// TestK8sManifests decodes deploy/k8s/*.yaml strictly into the upstream API types and checks
// that the pieces fit together: probes on the endpoints omniserve serves, a grace period covering
// --shutdown-timeout, selectors that select the pods, ports that exist, an HPA on a gauge
// omniserve exports, a PodMonitor on /metrics.
func TestK8sManifests(t *testing.T) {
	t.Parallel()
	m := loadK8sManifests(t)

	dep, pod := m.dep, m.dep.Spec.Template
	require.NotNil(t, dep.Spec.Replicas)
	require.Positive(t, *dep.Spec.Replicas)
	requireSelects(t, dep.Spec.Selector, pod.Labels, "Deployment selector")
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	require.NotEmpty(t, c.Image)
	for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		require.NotNil(t, pr, "%s probe", name)
		require.NotNil(t, pr.HTTPGet, "%s probe is an httpGet", name)
		require.True(t, containerPort(c, pr.HTTPGet.Port), "%s probe port %s is not a container port", name, pr.HTTPGet.Port.String())
	}
	require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path, "readiness follows /ready: 503 while draining")
	require.Equal(t, "/health", c.LivenessProbe.HTTPGet.Path, "liveness must not fail a draining pod")
	require.Equal(t, "/health", c.StartupProbe.HTTPGet.Path, "startup waits for the process, not the model")
	i := slices.Index(c.Args, "--shutdown-timeout")
	require.GreaterOrEqual(t, i, 0, "args set --shutdown-timeout")
	require.Less(t, i+1, len(c.Args), "--shutdown-timeout has a value")
	st, err := time.ParseDuration(c.Args[i+1])
	require.NoError(t, err)
	require.NotNil(t, pod.Spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	require.GreaterOrEqual(t, grace, st+5*time.Second, "terminationGracePeriodSeconds covers --shutdown-timeout plus the final close")
	require.LessOrEqual(t, grace, st+30*time.Second, "and not much more: a stuck pod should not linger")

	svc := m.svc
	require.NotEmpty(t, svc.Spec.Selector, "Service selector")
	require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)),
		"Service selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
	require.NotEmpty(t, svc.Spec.Ports)
	for _, p := range svc.Spec.Ports {
		require.True(t, containerPort(c, p.TargetPort), "Service targetPort %s is not a container port", p.TargetPort.String())
	}

	hpa := m.hpa
	require.Equal(t, "apps/v1", hpa.Spec.ScaleTargetRef.APIVersion)
	require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
	require.Equal(t, dep.Name, hpa.Spec.ScaleTargetRef.Name)
	require.NotNil(t, hpa.Spec.MinReplicas)
	require.Positive(t, *hpa.Spec.MinReplicas)
	require.Greater(t, hpa.Spec.MaxReplicas, *hpa.Spec.MinReplicas)
	require.Len(t, hpa.Spec.Metrics, 1)
	ms := hpa.Spec.Metrics[0]
	require.Equal(t, autoscalingv2.PodsMetricSourceType, ms.Type)
	require.NotNil(t, ms.Pods, "type Pods has a pods block")
	require.Equal(t, autoscalingv2.AverageValueMetricType, ms.Pods.Target.Type)
	require.NotNil(t, ms.Pods.Target.AverageValue)
	require.Positive(t, ms.Pods.Target.AverageValue.Sign())
	require.Equal(t, dto.MetricType_GAUGE, exportedFamilies(t)[ms.Pods.Metric.Name],
		"the HPA averages %q per pod: it must be a gauge omniserve exports", ms.Pods.Metric.Name)

	pm := m.pm
	requireSelects(t, &pm.Spec.Selector, pod.Labels, "PodMonitor selector")
	require.Len(t, pm.Spec.PodMetricsEndpoints, 1)
	ep := pm.Spec.PodMetricsEndpoints[0]
	require.Equal(t, "/metrics", ep.Path)
	require.NotNil(t, ep.Port, "the PodMonitor names the port")
	require.True(t, containerPort(c, intstr.FromString(*ep.Port)), "PodMonitor port %q is not a container port", *ep.Port)
	if ep.Interval != "" {
		_, err := model.ParseDuration(string(ep.Interval))
		require.NoError(t, err, "PodMonitor interval")
	}
}

// TestK8sManifestsStrict proves the decoding can fail: each case breaks the shipped manifest in
// one place and the decode must reject it.
func TestK8sManifestsStrict(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "k8s", "omniserve.yaml"))
	require.NoError(t, err)
	s, err := manifestScheme()
	require.NoError(t, err)
	_, err = decodeManifests(s, data)
	require.NoError(t, err, "the shipped manifest decodes")
	tests := []struct {
		name     string
		old, new string
		wantErr  string
	}{
		{"misspelt probe field", "httpGet: {path: /ready,", "httpGet: {pathh: /ready,", `unknown field "pathh"`},
		{"misplaced field", "image: ghcr.io/", "periodSeconds: 2\n          image: ghcr.io/", `unknown field "periodSeconds"`},
		{"string for an integer", "terminationGracePeriodSeconds: 40", "terminationGracePeriodSeconds: forty", "cannot unmarshal"},
		{"list for a map", "selector: {app.kubernetes.io/name: omniserve}\n  ports:", "selector: [omniserve]\n  ports:", "cannot unmarshal"},
		{"invalid quantity", `requests: {cpu: "4", memory: 4Gi}`, `requests: {cpu: "4", memory: 4GB}`, "quantities must match"},
		{"unknown field in the CRD type", "path: /metrics", "path: /metrics\n      intervall: 15s", `unknown field "intervall"`},
		{"duplicate key", "minReplicas: 2", "minReplicas: 2\n  minReplicas: 3", "already set"},
		{"unknown apiVersion", "apiVersion: autoscaling/v2\n", "apiVersion: autoscaling/v3\n", "no upstream type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, 1, bytes.Count(data, []byte(tt.old)), "the manifest has %q once", tt.old)
			broken := bytes.Replace(data, []byte(tt.old), []byte(tt.new), 1)
			_, err := decodeManifests(s, broken)
			require.Error(t, err)
			t.Log(err)
			require.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// exportedFamilies lists the families omniserve's /metrics serves, by name and type.
func exportedFamilies(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	metrics.NewCollectors(reg, "m").InitStages(2)
	metrics.RegisterAdmission(reg, "m", func() int { return 0 }, 32)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]dto.MetricType, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetType()
	}
	return out
}

// containerPort reports whether p names one of c's ports, by name or by number.
func containerPort(c corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && p.StrVal != "" && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
			return true
		}
	}
	return false
}

func requireSelects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string, what string) {
	t.Helper()
	require.NotNil(t, sel, what)
	require.False(t, len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0, "%s is empty: it would select every pod", what)
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err, what)
	require.True(t, s.Matches(labels.Set(podLabels)), "%s %s does not select the pods %v", what, s, podLabels)
}
