// RankSource over the daemon's JSON API.
#include <boost/json/parse.hpp>

#include "http_client.hpp"
#include "source.hpp"

namespace rankstat::cli {
namespace {

class DaemonSource final : public RankSource {
 public:
  explicit DaemonSource(DaemonOptions options) : options_(std::move(options)) {}

  boost::json::object ranks() override {
    auto doc = get("/api/v1/ranks");
    if (!doc) throw SourceError("the daemon at " + options_.endpoint.display() + " has no /api/v1/ranks");
    return std::move(*doc);
  }

  std::optional<boost::json::object> rank(const std::string& id) override {
    return get("/api/v1/ranks/" + id);
  }

  boost::json::object all_details() override {
    // One request where the daemon offers it; a daemon older than `?details=1` ignores the query and
    // answers summaries (no "details": true), so then each rank is asked for on its own.
    if (auto bulk = get("/api/v1/ranks?details=1")) {
      if (const auto* flag = bulk->if_contains("details");
          flag != nullptr && flag->is_bool() && flag->as_bool()) {
        const auto* ranks = bulk->if_contains("ranks");
        if (ranks == nullptr || !ranks->is_array())
          throw SourceError("the daemon's rank list has no \"ranks\" array");
        return std::move(*bulk);
      }
    }
    boost::json::array out;
    boost::json::object list = ranks();
    const auto* ranks = list.if_contains("ranks");
    if (ranks == nullptr || !ranks->is_array())
      throw SourceError("the daemon's rank list has no \"ranks\" array");
    for (const auto& summary : ranks->as_array()) {
      const auto* id = summary.is_object() ? summary.as_object().if_contains("id") : nullptr;
      if (id == nullptr || !id->is_string()) continue;
      // A rank that vanished between the two requests is simply not shown.
      if (auto detail = rank(std::string(id->as_string()))) out.emplace_back(std::move(*detail));
    }
    list["ranks"] = std::move(out);
    list["details"] = true;
    return list;
  }

  std::string description() const override {
    return "daemon " + std::string(options_.endpoint.tls ? "https://" : "") + options_.endpoint.display();
  }

 private:
  // The JSON object at `target`; nullopt on 404.
  std::optional<boost::json::object> get(const std::string& target) {
    const HttpReply reply = http_get(options_.endpoint, target, options_.timeout, options_.security,
                                     {{"Accept", "application/json"}});
    if (reply.failure == HttpFailure::kUnreachable) {
      throw SourceUnavailable(
          "rankstatd is not reachable: " + reply.error +
          " (is it running? --address or RANKSTAT_ADDRESS, or --direct to read the segments)");
    }
    if (reply.failure != HttpFailure::kNone) throw SourceError(reply.error);
    if (reply.status == 404) return std::nullopt;
    if (reply.status == 401) {
      throw SourceError(
          options_.security.username.empty()
              ? "rankstatd asks for credentials: give --user and --password-file (or RANKSTAT_PASSWORD)"
              : "rankstatd refused user '" + options_.security.username + "': wrong user or password");
    }
    if (reply.status != 200) {
      throw SourceError("rankstatd answered " + std::to_string(reply.status) + " for " + target);
    }
    boost::system::error_code ec;
    boost::json::value value = boost::json::parse(reply.body, ec);
    if (ec || !value.is_object()) {
      throw SourceError("rankstatd's answer for " + target + " is not a JSON object" +
                        (ec ? ": " + ec.message() : std::string()));
    }
    return std::move(value.as_object());
  }

  DaemonOptions options_;
};

}  // namespace

std::unique_ptr<RankSource> make_daemon_source(DaemonOptions options) {
  return std::make_unique<DaemonSource>(std::move(options));
}

}  // namespace rankstat::cli
