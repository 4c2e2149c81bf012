package localcontrolplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// installCRDs creates (or updates) every CRD found in dirs and waits until each is established
// and served, so a client can use the types as soon as the control plane is returned.
func installCRDs(ctx context.Context, cfg *rest.Config, dirs []string, timeout time.Duration) error {
	crds, err := readCRDs(dirs)
	if err != nil || len(crds) == 0 {
		return err
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("controlplane: install CRDs: %w", err)
	}
	for _, crd := range crds {
		if err := apply(ctx, c, crd); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controlplane: install CRDs: %w", err)
	}
	for _, crd := range crds {
		if err := waitServed(ctx, c, dc, crd); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	err := c.Create(ctx, crd.DeepCopy())
	if apierrors.IsAlreadyExists(err) {
		// A reused control plane: bring the stored CRD up to date with the files.
		var cur apiextensionsv1.CustomResourceDefinition
		if err = c.Get(ctx, client.ObjectKey{Name: crd.Name}, &cur); err == nil {
			upd := crd.DeepCopy()
			upd.ResourceVersion = cur.ResourceVersion
			err = c.Update(ctx, upd)
		}
	}
	if err != nil {
		return fmt.Errorf("controlplane: install CRD %s: %w", crd.Name, err)
	}
	return nil
}

// waitServed waits until the CRD is Established and its resource appears in discovery.
func waitServed(ctx context.Context, c client.Client, dc discovery.DiscoveryInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	var err error // the last read's, for the error when ctx ends
	perr := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var cur apiextensionsv1.CustomResourceDefinition
		err = c.Get(ctx, client.ObjectKey{Name: crd.Name}, &cur)
		return err == nil && established(&cur) && discovered(dc, crd), nil
	})
	if perr != nil {
		if err != nil {
			perr = fmt.Errorf("%w (last error: %w)", perr, err)
		}
		return fmt.Errorf("controlplane: CRD %s not established: %w", crd.Name, perr)
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func discovered(dc discovery.DiscoveryInterface, crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		list, err := dc.ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
		if err != nil {
			return false
		}
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural }) {
			return false
		}
	}
	return true
}

// readCRDs reads every CustomResourceDefinition in the YAML files of dirs (multi-document
// files allowed), sorted by name.
func readCRDs(dirs []string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("controlplane: read CRDs: %w", err)
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("controlplane: read CRDs: %w", err)
			}
			reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
			for i := 1; ; i++ {
				doc, err := reader.Read()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return nil, fmt.Errorf("controlplane: %s document %d: %w", path, i, err)
				}
				if len(bytes.TrimSpace(doc)) == 0 {
					continue
				}
				var crd apiextensionsv1.CustomResourceDefinition
				if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
					return nil, fmt.Errorf("controlplane: %s document %d: %w", path, i, err)
				}
				if crd.Kind == "CustomResourceDefinition" {
					crds = append(crds, &crd)
				}
			}
		}
	}
	sort.Slice(crds, func(i, j int) bool { return crds[i].Name < crds[j].Name })
	return crds, nil
}
