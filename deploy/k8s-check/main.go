// Command k8s-check decodes every Kubernetes manifest in the YAML streams it is given strictly
// against the official API types (k8s.io/api): an unknown field, a wrong type or a kind it does
// not know is an error naming the file, the document and the object. Tessera's CI runs it on
// what `tessera deploy kubernetes` renders for every example system file.
//
// Usage: k8s-check FILE... (exit status 1 if any document is refused)
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// typed gives the API type of a kind Tessera renders.
func typed(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 Pod":
		return &corev1.Pod{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	}
	return nil, fmt.Errorf("apiVersion %q kind %q is not a kind Tessera renders", apiVersion, kind)
}

// check decodes one document strictly and checks its name.
func check(doc []byte) (string, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return "", fmt.Errorf("not YAML: %w", err)
	}
	var meta struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		return "", fmt.Errorf("no apiVersion, kind and metadata: %w", err)
	}
	what := meta.Kind + " " + meta.Metadata.Name
	object, err := typed(meta.APIVersion, meta.Kind)
	if err != nil {
		return what, err
	}
	decoder := json.NewDecoder(bytes.NewReader(js))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(object); err != nil {
		return what, err
	}
	if decoder.More() {
		return what, errors.New("more than one object in the document")
	}
	for _, problem := range validation.IsDNS1123Subdomain(meta.Metadata.Name) {
		return what, fmt.Errorf("metadata.name: %s", problem)
	}
	if meta.Metadata.Namespace == "" {
		return what, errors.New("metadata.namespace is empty")
	}
	return what, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: k8s-check FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		file, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(file))
		kinds := map[string]int{}
		count := 0
		for index := 1; ; index++ {
			doc, err := reader.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: document %d: %v\n", path, index, err)
				failed = true
				break
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			what, err := check(doc)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: document %d (%s): %v\n", path, index, what, err)
				failed = true
				continue
			}
			kinds[what[:bytes.IndexByte([]byte(what), ' ')]]++
			count++
		}
		file.Close()
		if count == 0 {
			fmt.Fprintf(os.Stderr, "%s: no manifest\n", path)
			failed = true
			continue
		}
		fmt.Printf("%s: %d objects decoded strictly %v\n", path, count, kinds)
	}
	if failed {
		os.Exit(1)
	}
}
