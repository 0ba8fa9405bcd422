// Package certstest writes the certificates TLS tests need: a CA, a
// server certificate for 127.0.0.1 and localhost, a client certificate,
// an expired server certificate and a CA that signed none of them.
// Tests only: no runtime or tool imports it outside its tests.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the paths of what Write wrote; each Cert has its Key beside
// it (name.pem, name-key.pem).
type Files struct {
	CA, OtherCA         string
	Server, ServerKey   string
	Expired, ExpiredKey string
	Client, ClientKey   string
	serial              int64
	caCert              *x509.Certificate
	caKey               *ecdsa.PrivateKey
	dir                 string
}

// Write writes a fresh set into dir.
func Write(t testing.TB, dir string) *Files {
	t.Helper()
	f := &Files{dir: dir}
	f.caCert, f.caKey, f.CA = f.selfSigned(t, "shardctl test CA", "ca")
	_, _, f.OtherCA = f.selfSigned(t, "another CA", "other-ca")
	now := time.Now()
	f.Server, f.ServerKey = f.Issue(t, "server", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageServerAuth)
	f.Expired, f.ExpiredKey = f.Issue(t, "expired", now.Add(-48*time.Hour), now.Add(-24*time.Hour), x509.ExtKeyUsageServerAuth)
	f.Client, f.ClientKey = f.Issue(t, "client", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
	return f
}

func (f *Files) selfSigned(t testing.TB, cn, name string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key := newKey(t)
	f.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(f.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := f.write(t, name, der, key)
	return cert, key, path
}

// Issue signs a certificate with the CA for 127.0.0.1 and localhost,
// valid from notBefore to notAfter for its usages (a server, a client, or
// both as etcd's members are), and writes it as name.pem and name-key.pem
// (replacing what is there: a rotation).
func (f *Files) Issue(t testing.TB, name string, notBefore, notAfter time.Time, usage ...x509.ExtKeyUsage) (cert, key string) {
	t.Helper()
	k := newKey(t)
	f.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(f.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usage, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.caCert, &k.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return f.write(t, name, der, k)
}

func (f *Files) write(t testing.TB, name string, der []byte, key *ecdsa.PrivateKey) (cert, keyFile string) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyFile = filepath.Join(f.dir, name+".pem"), filepath.Join(f.dir, name+"-key.pem")
	for path, block := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		// Written beside and renamed, as a Secret's files change: a reader
		// never sees half a file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	return cert, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
