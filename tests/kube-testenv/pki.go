package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

type pkiFiles struct {
	caPEM                   []byte
	caCert                  string
	servingCert, servingKey string
	saKey, saPub            string
	tokens                  string
}

// pkiPaths names the files of the PKI under dir.
func pkiPaths(dir string) *pkiFiles {
	pkiDir := filepath.Join(dir, "pki")
	return &pkiFiles{
		caCert:      filepath.Join(pkiDir, "ca.crt"),
		servingCert: filepath.Join(pkiDir, "apiserver.crt"),
		servingKey:  filepath.Join(pkiDir, "apiserver.key"),
		saKey:       filepath.Join(pkiDir, "sa.key"),
		saPub:       filepath.Join(pkiDir, "sa.pub"),
		tokens:      filepath.Join(pkiDir, "tokens.csv"),
	}
}

// loadPKI reuses the PKI an earlier run wrote, so that a restarted server
// keeps its CA and ServiceAccount signing key: the kubeconfigs and tokens
// issued before the restart stay valid.
func loadPKI(dir string) (*pkiFiles, error) {
	p := pkiPaths(dir)
	for _, f := range []string{p.servingCert, p.servingKey, p.saKey, p.saPub, p.tokens} {
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
	}
	ca, err := os.ReadFile(p.caCert)
	if err != nil {
		return nil, err
	}
	p.caPEM = ca
	return p, nil
}

// writePKI creates a throw-away CA, a serving certificate for loopback and
// the server's address, the ServiceAccount signing key pair and the static
// admin token file.
func writePKI(dir string, address net.IP) (*pkiFiles, error) {
	p := pkiPaths(dir)
	if err := os.MkdirAll(filepath.Dir(p.caCert), 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "netendpoint-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour * 365),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caCert, p.caPEM, 0o600); err != nil {
		return nil, err
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour * 365),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), address},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), 0o600); err != nil {
		return nil, err
	}
	if err := writeECKey(p.servingKey, srvKey); err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return nil, err
	}
	line := fmt.Sprintf("%s,admin,admin,system:masters\n", adminToken)
	if err := os.WriteFile(p.tokens, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writeECKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeKubeconfig writes a token-authenticated kubeconfig for server.
func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s@testenv
  context:
    cluster: testenv
    user: %s
current-context: %s@testenv
`, server, base64.StdEncoding.EncodeToString(caPEM), user, token, user, user, user)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
