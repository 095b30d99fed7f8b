package test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The manifests are checked offline against the fields of the upstream API types they use
// (apps/v1 Deployment, v1 Service, autoscaling/v2 HorizontalPodAutoscaler,
// monitoring.coreos.com/v1 PodMonitor). k8s.io/api would pull k8s.io/apimachinery and its
// tree into this module for one test, so these are hand-written subsets of those types,
// decoded strictly: a misspelt or misplaced key fails, as kubectl's strict decoding would.

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type k8sContainer struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	Env []struct {
		Name      string    `yaml:"name"`
		ValueFrom yaml.Node `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sDoc struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
	Spec       struct {
		// Deployment
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Strategy yaml.Node `yaml:"strategy"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
				Containers                    []k8sContainer `yaml:"containers"`
				Volumes                       []yaml.Node    `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		// Service
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
			Protocol   string `yaml:"protocol"`
		} `yaml:"ports"`
		// HorizontalPodAutoscaler
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas int `yaml:"minReplicas"`
		MaxReplicas int `yaml:"maxReplicas"`
		Metrics     []struct {
			Type string `yaml:"type"`
			Pods struct {
				Metric struct {
					Name string `yaml:"name"`
				} `yaml:"metric"`
				Target struct {
					Type         string `yaml:"type"`
					AverageValue string `yaml:"averageValue"`
				} `yaml:"target"`
			} `yaml:"pods"`
		} `yaml:"metrics"`
		Behavior yaml.Node `yaml:"behavior"`
		// PodMonitor
		PodMetricsEndpoints []struct {
			Port     string `yaml:"port"`
			Path     string `yaml:"path"`
			Interval string `yaml:"interval"`
		} `yaml:"podMetricsEndpoints"`
	} `yaml:"spec"`
}

// TestK8sManifests decodes deploy/k8s/*.yaml strictly and checks that the pieces fit together:
// probes on the endpoints omniserve serves, a grace period covering --shutdown-timeout,
// selectors that select the pods, an HPA on an omniserve metric, a PodMonitor on /metrics.
func TestK8sManifests(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "k8s", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	byKind := map[string]k8sDoc{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		docs := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var n yaml.Node
			err := docs.Decode(&n)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			serviceSelector(n.Content[0])
			raw, err := yaml.Marshal(&n)
			require.NoError(t, err)
			dec := yaml.NewDecoder(bytes.NewReader(raw))
			dec.KnownFields(true) // strict: an unknown or misplaced key fails
			var d k8sDoc
			require.NoError(t, dec.Decode(&d), f)
			require.NotEmpty(t, d.Metadata.Name, "%s: %s without metadata.name", f, d.Kind)
			byKind[d.Kind] = d
		}
	}
	want := map[string]string{"Deployment": "apps/v1", "Service": "v1", "HorizontalPodAutoscaler": "autoscaling/v2",
		"PodMonitor": "monitoring.coreos.com/v1"}
	for kind, api := range want {
		require.Contains(t, byKind, kind)
		require.Equal(t, api, byKind[kind].APIVersion, kind)
	}

	dep := byKind["Deployment"]
	pod := dep.Spec.Template
	require.Positive(t, dep.Spec.Replicas)
	requireSelects(t, dep.Spec.Selector.MatchLabels, pod.Metadata.Labels, "Deployment selector")
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	require.NotEmpty(t, c.Image)
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for name, pr := range map[string]*k8sProbe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		require.NotNil(t, pr, name)
		require.NotNil(t, pr.HTTPGet, name)
		require.True(t, ports[pr.HTTPGet.Port], "%s probe port %q is not a container port", name, pr.HTTPGet.Port)
	}
	require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path, "readiness follows /ready: 503 while draining")
	require.Equal(t, "/health", c.LivenessProbe.HTTPGet.Path, "liveness must not fail a draining pod")
	i := slices.Index(c.Args, "--shutdown-timeout")
	require.GreaterOrEqual(t, i, 0, "args set --shutdown-timeout")
	st, err := time.ParseDuration(c.Args[i+1])
	require.NoError(t, err)
	grace := time.Duration(pod.Spec.TerminationGracePeriodSeconds) * time.Second
	require.GreaterOrEqual(t, grace, st+5*time.Second, "terminationGracePeriodSeconds covers --shutdown-timeout plus the final close")
	require.LessOrEqual(t, grace, st+30*time.Second, "and not much more: a stuck pod should not linger")

	svc := byKind["Service"]
	requireSelects(t, svc.Spec.Selector.MatchLabels, pod.Metadata.Labels, "Service selector")
	require.NotEmpty(t, svc.Spec.Ports)
	for _, p := range svc.Spec.Ports {
		require.True(t, ports[p.TargetPort], "Service targetPort %q", p.TargetPort)
	}

	hpa := byKind["HorizontalPodAutoscaler"]
	require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
	require.Equal(t, dep.Metadata.Name, hpa.Spec.ScaleTargetRef.Name)
	require.Positive(t, hpa.Spec.MinReplicas)
	require.Greater(t, hpa.Spec.MaxReplicas, hpa.Spec.MinReplicas)
	require.Len(t, hpa.Spec.Metrics, 1)
	require.Equal(t, "Pods", hpa.Spec.Metrics[0].Type)
	require.True(t, strings.HasPrefix(hpa.Spec.Metrics[0].Pods.Metric.Name, "omniserve_"), "an omniserve metric")
	require.NotEmpty(t, hpa.Spec.Metrics[0].Pods.Target.AverageValue)

	pm := byKind["PodMonitor"]
	requireSelects(t, pm.Spec.Selector.MatchLabels, pod.Metadata.Labels, "PodMonitor selector")
	require.Len(t, pm.Spec.PodMetricsEndpoints, 1)
	require.Equal(t, "/metrics", pm.Spec.PodMetricsEndpoints[0].Path)
	require.True(t, ports[pm.Spec.PodMetricsEndpoints[0].Port])
}

// serviceSelector rewrites a Service's spec.selector, a plain label map in the API, into the
// {matchLabels} shape k8sDoc shares with the other kinds.
func serviceSelector(n *yaml.Node) {
	kind, spec := mapValue(n, "kind"), mapValue(n, "spec")
	if kind == nil || kind.Value != "Service" || spec == nil {
		return
	}
	if sel := mapValue(spec, "selector"); sel != nil && mapValue(sel, "matchLabels") == nil {
		setMapValue(spec, "selector", &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "matchLabels"}, sel}})
	}
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func setMapValue(n *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content[i+1] = v
		}
	}
}

func requireSelects(t *testing.T, sel, labels map[string]string, what string) {
	t.Helper()
	require.NotEmpty(t, sel, what)
	for k, v := range sel {
		require.Equal(t, v, labels[k], "%s %s=%s does not select the pods", what, k, v)
	}
}
