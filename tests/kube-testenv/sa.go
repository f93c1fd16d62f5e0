package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// saKubeconfig makes sure a ServiceAccount exists, mints a token for it with
// the TokenRequest API and writes a kubeconfig (and optionally the bare
// token) that authenticates as that ServiceAccount and nothing more.
func saKubeconfig(args []string) error {
	fs := flag.NewFlagSet("sa-kubeconfig", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory given to serve")
	ns := fs.String("namespace", "default", "ServiceAccount namespace")
	name := fs.String("name", "", "ServiceAccount name")
	out := fs.String("out", "", "kubeconfig to write")
	tokenOut := fs.String("token-out", "", "also write the bare token to this file")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	boundNode := fs.String("bound-node", "", "bind the token to this Node object, as a Pod-bound token of a Pod on that node would be (the API server then adds the node's name to the token's user info)")
	_ = fs.Parse(args)
	if *dir == "" || *name == "" || (*out == "" && *tokenOut == "") {
		return errors.New("--dir, --name and --out or --token-out are required")
	}
	admin, err := clientcmd.BuildConfigFromFlags("", filepath.Join(*dir, "kubeconfig"))
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: *ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", *ns, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(*ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: *name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("serviceaccount %s/%s: %w", *ns, *name, err)
	}
	secs := int64(ttl.Seconds())
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}
	if *boundNode != "" {
		node, err := cs.CoreV1().Nodes().Get(ctx, *boundNode, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s to bind the token to: %w", *boundNode, err)
		}
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(*ns).CreateToken(ctx, *name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", *ns, *name, err)
	}
	if *tokenOut != "" {
		if err := os.WriteFile(*tokenOut, []byte(tr.Status.Token), 0o600); err != nil {
			return err
		}
	}
	if *out != "" {
		user := "system:serviceaccount:" + *ns + ":" + *name
		if err := writeKubeconfig(*out, admin.Host, admin.CAData, strings.ReplaceAll(user, ":", "-"), tr.Status.Token); err != nil {
			return err
		}
	}
	return nil
}
