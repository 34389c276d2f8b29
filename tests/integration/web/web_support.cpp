#include "web_support.hpp"

#include <catch2/catch.hpp>
#include <fstream>

namespace rankstat::web_test {

namespace {

void run_or_fail(const std::string& command) {
  std::string output;
  const int status = testkit::run_command(command, &output);
  INFO(command << "\n" << output);
  REQUIRE(status == 0);
}

// An EC P-256 key and certificate signing request for `subject`.
std::string new_request(const std::string& dir, const std::string& name, const std::string& subject) {
  return "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + dir + "/" + name +
         ".key -out " + dir + "/" + name + ".csr -subj " + subject;
}

void new_ca(const std::string& dir, const std::string& name) {
  run_or_fail("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -keyout " + dir +
              "/" + name + ".key -out " + dir + "/" + name + ".crt -subj /CN=" + name);
}

void sign(const std::string& dir, const std::string& name, const std::string& ca,
          const std::string& extensions) {
  write_file(dir + "/" + name + ".ext", extensions);
  run_or_fail("openssl x509 -req -days 2 -in " + dir + "/" + name + ".csr -CA " + dir + "/" + ca +
              ".crt -CAkey " + dir + "/" + ca + ".key -CAcreateserial -out " + dir + "/" + name +
              ".crt -extfile " + dir + "/" + name + ".ext");
}

}  // namespace

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

TestPki::TestPki() {
  const std::string& d = dir_.path();
  new_ca(d, "ca");
  new_ca(d, "rogue-ca");
  run_or_fail(new_request(d, "server", "/CN=localhost"));
  sign(d, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  run_or_fail(new_request(d, "client", "/CN=scraper"));
  sign(d, "client", "ca", "subjectAltName=DNS:scraper.example\nextendedKeyUsage=clientAuth\n");
  run_or_fail(new_request(d, "rogue-client", "/CN=scraper"));
  sign(d, "rogue-client", "rogue-ca", "subjectAltName=DNS:scraper.example\nextendedKeyUsage=clientAuth\n");
}

void TestPki::issue_replacement_server(const std::string& tag) {
  const std::string& d = dir_.path();
  new_ca(d, "ca-" + tag);
  run_or_fail(new_request(d, "server-" + tag, "/CN=localhost"));
  sign(d, "server-" + tag, "ca-" + tag,
       "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
}

std::string bcrypt_hash(const std::string& password) {
  std::string output;
  REQUIRE(testkit::run_command("htpasswd -nbBC 10 '' '" + password + "' | tr -d ':\\n'", &output) == 0);
  REQUIRE(output.starts_with("$2y$10$"));
  return output;
}

int curl_status(const std::string& url, const std::vector<std::string>& arguments) {
  std::string command = "curl -s -o /dev/null --max-time 10 -w '%{http_code}'";
  for (const std::string& argument : arguments) command += " '" + argument + "'";
  command += " '" + url + "'";
  std::string output;
  testkit::run_command(command, &output);
  return std::atoi(output.c_str());
}

}  // namespace rankstat::web_test
