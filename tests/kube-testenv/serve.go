package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// adminToken authenticates the admin user (group system:masters). It only
// ever exists on loopback in a throw-away test directory.
const adminToken = "netendpoint-testenv-admin"

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory (certs, etcd data, kubeconfig)")
	port := fs.Int("port", 0, "API server port (0 picks a free one)")
	address := fs.String("address", "127.0.0.1", "address the API server listens on and advertises; it is in the serving certificate")
	serviceCIDR := fs.String("service-cidr", "10.96.0.0/24", "Service cluster IP range; its first address is the ClusterIP of the `kubernetes` Service, which pods reach the API server by (without kube-proxy, make it the --address)")
	keep := fs.Bool("keep-data", false, "keep etcd data and the PKI from a previous run (a restart)")
	audit := fs.Bool("audit", false, "write an audit log of every request to DIR/audit.log")
	_ = fs.Parse(args)
	if *dir == "" {
		return errors.New("--dir is required")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	*dir = abs
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(*dir, "ready"))
	if !*keep {
		if err := os.RemoveAll(filepath.Join(*dir, "etcd")); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(*dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return err
	}

	started := time.Now()
	ip := net.ParseIP(*address)
	if ip == nil {
		return fmt.Errorf("--address %q is not an IP address", *address)
	}
	if *port == 0 {
		if *port, err = freePort(*address); err != nil {
			return err
		}
	}
	var pki *pkiFiles
	if *keep {
		pki, err = loadPKI(*dir)
	}
	if pki == nil {
		pki, err = writePKI(*dir, ip)
	}
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}

	etcd, etcdURL, err := startEtcd(filepath.Join(*dir, "etcd"))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	server := "https://" + net.JoinHostPort(*address, strconv.Itoa(*port))
	if err := writeKubeconfig(filepath.Join(*dir, "kubeconfig"), server, pki.caPEM, "admin", adminToken); err != nil {
		return err
	}

	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + *address,
		"--advertise-address=" + *address,
		"--secure-port=" + strconv.Itoa(*port),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCert,
		"--token-auth-file=" + pki.tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pki.saPub,
		"--service-account-signing-key-file=" + pki.saKey,
		"--api-audiences=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + *serviceCIDR,
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=0",
	}
	if *audit {
		policy := filepath.Join(*dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return err
		}
		apiArgs = append(apiArgs,
			"--audit-policy-file="+policy,
			"--audit-log-path="+filepath.Join(*dir, "audit.log"),
			"--audit-log-mode=blocking",
		)
	}

	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(apiArgs)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()

	readyCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() {
		if err := waitReadyz(readyCtx, server, pki.caPEM); err != nil {
			fmt.Fprintf(os.Stderr, "kube-testenv: API server not ready: %v\n", err)
			return
		}
		msg := fmt.Sprintf("server=%s\nstartup_ms=%d\n", server, time.Since(started).Milliseconds())
		if err := os.WriteFile(filepath.Join(*dir, "ready"), []byte(msg), 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "kube-testenv: %v\n", err)
			return
		}
		fmt.Fprintf(os.Stderr, "kube-testenv: ready at %s after %s\n", server, time.Since(started).Round(time.Millisecond))
	}()

	// The API server command installs its own SIGTERM/SIGINT handler and
	// returns once it has shut down; etcd is closed by the deferred Close.
	err = <-done
	_ = os.Remove(filepath.Join(*dir, "ready"))
	_ = os.Remove(filepath.Join(*dir, "pid"))
	fmt.Fprintln(os.Stderr, "kube-testenv: stopped")
	return err
}

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func freePort(address string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startEtcd(dataDir string) (*embed.Etcd, string, error) {
	clientPort, err := freePort("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	peerPort, err := freePort("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	cfg.Name = "testenv"
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// Test data is disposable: skip fsync so the suite does not wait on the disk.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("etcd did not become ready within 60s")
	}
	return e, clientURL.String(), nil
}

func waitReadyz(ctx context.Context, server string, caPEM []byte) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func wait(args []string) error {
	fs := flag.NewFlagSet("wait", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory given to serve")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait")
	_ = fs.Parse(args)
	if *dir == "" {
		return errors.New("--dir is required")
	}
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(*dir, "ready")); err == nil {
			fmt.Print(string(b))
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("API server in %s not ready after %s (see its log)", *dir, *timeout)
}
