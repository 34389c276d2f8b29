#include "top.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <tuple>

#include "format.hpp"
#include "rankstat/shmproto/liveness.hpp"
#include "render.hpp"
#include "table.hpp"
#include "terminal.hpp"

namespace rankstat::cli {
namespace {

constexpr std::pair<SortKey, std::string_view> kSortNames[] = {
    {SortKey::kId, "id"},           {SortKey::kState, "state"},
    {SortKey::kRunning, "running"}, {SortKey::kQueued, "queue"},
    {SortKey::kKv, "kv"},           {SortKey::kGen, "gen"},
    {SortKey::kSpec, "spec"},       {SortKey::kDp, "dp"},
    {SortKey::kFwd, "fwd"},         {SortKey::kHeartbeat, "heartbeat"}};
static_assert(std::size(kSortNames) == kSortKeyCount);

// The order in which `state` sorts: the ranks that need a look first.
int state_severity(std::string_view state) {
  const auto known = shm::rank_state_from_name(state);
  if (!known) return 4;
  switch (*known) {
    case shm::RankState::kDead:
      return 0;
    case shm::RankState::kStalled:
      return 1;
    case shm::RankState::kLive:
      return 2;
    case shm::RankState::kClosed:
      return 3;
  }
  return 4;
}

bool alive(const TopRow& r) {
  const auto known = shm::rank_state_from_name(r.state);
  return known && shm::is_live(*known);
}

TopRow row_from(const boost::json::value& d) {
  TopRow r;
  r.id = string_at(d, {"id"});
  r.instance = string_at(d, {"instance"});
  r.role = string_at(d, {"role"});
  r.state = string_at(d, {"state"}, "?");
  r.tp_rank = number_at(d, {"ranks", "tp_rank"});
  r.pp_rank = number_at(d, {"ranks", "pp_rank"});
  r.dp_rank = number_at(d, {"ranks", "dp_rank"});
  r.heartbeat_age = number_at(d, {"heartbeat_age_seconds"});
  const boost::json::value* fields = find_path(d, {"scheduler", "fields"});
  if (fields == nullptr) return r;
  r.running = number_at(*fields, {"basics", "num_running_reqs"});
  r.queued = number_at(*fields, {"basics", "num_queue_reqs"});
  r.gen_throughput = number_at(*fields, {"basics", "gen_throughput"});
  r.kv_used = number_at(*fields, {"pool", "kv_used_tokens"});
  r.kv_evictable = number_at(*fields, {"pool", "kv_evictable_tokens"});
  r.kv_available = number_at(*fields, {"pool", "kv_available_tokens"});
  r.token_usage = number_at(*fields, {"pool", "token_usage"});
  r.spec_accept_length = number_at(*fields, {"speculative", "spec_accept_length"});
  r.fwd_occupancy = number_at(*fields, {"forward", "fwd_occupancy"});
  return r;
}

// Each DP rank's load against the mean of its live DP peers (same instance, role, TP and PP rank):
// 1.00 is balanced, 1.50 carries half again the mean. The load is the KV tokens in use, or the running
// requests when the group reports no KV tokens at all.
void fill_dp_imbalance(std::vector<TopRow>& rows) {
  using Key = std::tuple<std::string, std::string, double, double>;
  std::map<Key, std::vector<TopRow*>> groups;
  for (TopRow& r : rows) {
    if (!alive(r) || !r.dp_rank || !r.running) continue;
    groups[Key{r.instance, r.role, r.tp_rank.value_or(-1), r.pp_rank.value_or(-1)}].push_back(&r);
  }
  for (auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    double kv_sum = 0;
    double running_sum = 0;
    for (const TopRow* r : members) {
      kv_sum += r->kv_used.value_or(0);
      running_sum += *r->running;
    }
    const bool by_kv = kv_sum > 0;
    const double mean = (by_kv ? kv_sum : running_sum) / static_cast<double>(members.size());
    if (!(mean > 0)) continue;
    for (TopRow* r : members) r->dp_imbalance = (by_kv ? r->kv_used.value_or(0) : *r->running) / mean;
  }
}

std::optional<double> sort_value(const TopRow& r, SortKey key) {
  switch (key) {
    case SortKey::kRunning:
      return r.running;
    case SortKey::kQueued:
      return r.queued;
    case SortKey::kKv:
      return r.token_usage;
    case SortKey::kGen:
      return r.gen_throughput;
    case SortKey::kSpec:
      return r.spec_accept_length;
    case SortKey::kDp:
      return r.dp_imbalance;
    case SortKey::kFwd:
      return r.fwd_occupancy;
    case SortKey::kHeartbeat:
      return r.heartbeat_age;
    case SortKey::kId:
    case SortKey::kState:
      break;
  }
  return std::nullopt;
}

// Id ascending, state worst first, numbers largest first; `reverse` flips the primary order. Rows
// without the value go last either way; ties fall back to the id.
bool row_before(const TopRow& a, const TopRow& b, SortKey key, bool reverse) {
  if (key == SortKey::kId) return reverse ? a.id > b.id : a.id < b.id;
  if (key == SortKey::kState) {
    const int sa = state_severity(a.state);
    const int sb = state_severity(b.state);
    if (sa != sb) return reverse ? sa > sb : sa < sb;
    return a.id < b.id;
  }
  const auto va = sort_value(a, key);
  const auto vb = sort_value(b, key);
  const bool ha = va && std::isfinite(*va);
  const bool hb = vb && std::isfinite(*vb);
  if (ha != hb) return ha;
  if (ha && *va != *vb) return reverse ? *va < *vb : *va > *vb;
  return a.id < b.id;
}

// The KV pool as a bar: '#' used, '+' evictable (cached, reclaimable), '.' available.
Cell kv_bar(const TopRow& r, int width) {
  Cell cell;
  const double used = r.kv_used.value_or(0);
  const double evictable = r.kv_evictable.value_or(0);
  const double available = r.kv_available.value_or(0);
  const double total = used + evictable + available;
  if (!(total > 0)) {
    cell.parts.push_back({"[" + std::string(static_cast<std::size_t>(width), ' ') + "]", style::kNone});
    return cell;
  }
  const int used_cells = static_cast<int>(std::lround(used / total * width));
  const int through_evictable = static_cast<int>(std::lround((used + evictable) / total * width));
  const int evictable_cells = std::max(0, through_evictable - used_cells);
  const int free_cells = std::max(0, width - used_cells - evictable_cells);
  cell.parts.push_back({"[", style::kNone});
  cell.parts.push_back({std::string(static_cast<std::size_t>(used_cells), '#'), style::kRed});
  cell.parts.push_back({std::string(static_cast<std::size_t>(evictable_cells), '+'), style::kYellow});
  cell.parts.push_back({std::string(static_cast<std::size_t>(free_cells), '.'), style::kGreen});
  cell.parts.push_back({"]", style::kNone});
  return cell;
}

const char* usage_style(std::optional<double> usage) {
  if (!usage) return style::kNone;
  if (*usage >= 0.95) return style::kBoldRed;
  if (*usage >= 0.85) return style::kYellow;
  return style::kNone;
}

std::string clock_text() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

struct Frame {
  std::string source;
  std::string error;  // the last refresh failed: shown, the previous rows stay
  // Segments the source could not use, by reason (a rank whose segment faulted is among them, not a row).
  boost::json::object rejected;
  bool interactive = false;
  TopOptions options;
};

std::vector<StyledLine> render_frame(const std::vector<TopRow>& rows, const Frame& f, int columns,
                                     int max_lines) {
  std::vector<StyledLine> lines;
  StyledLine title;
  char interval[32];
  std::snprintf(interval, sizeof interval, "%.3g", std::chrono::duration<double>(f.options.interval).count());
  title.add("rankstat top", style::kBold);
  title.add(" - " + f.source + " - " + clock_text() + " - every " + interval + "s - sort " +
            std::string(sort_key_name(f.options.sort)) + (f.options.reverse ? " (reversed)" : ""));
  lines.push_back(std::move(title));

  std::map<std::string, int> states;
  double running = 0;
  double queued = 0;
  double gen = 0;
  for (const TopRow& r : rows) {
    ++states[r.state];
    if (alive(r)) {
      running += r.running.value_or(0);
      queued += r.queued.value_or(0);
      gen += r.gen_throughput.value_or(0);
    }
  }
  StyledLine summary;
  summary.add("ranks " + std::to_string(rows.size()) + ":");
  for (const shm::RankState state :
       {shm::RankState::kLive, shm::RankState::kStalled, shm::RankState::kDead, shm::RankState::kClosed}) {
    const std::string name(shm::rank_state_name(state));
    const int n = states.count(name) != 0 ? states[name] : 0;
    summary.add(" ");
    summary.add(std::to_string(n) + " " + name,
                n > 0 && state != shm::RankState::kClosed ? state_style(name) : style::kNone);
  }
  summary.add("   running " + format_count(running) + "   queued " + format_count(queued) + "   gen " +
              format_rate(gen) + " tok/s");
  lines.push_back(std::move(summary));
  if (auto rejected = rejected_segments_line(f.rejected)) lines.push_back(std::move(*rejected));
  if (!f.error.empty()) {
    StyledLine error;
    error.add(f.error + " (retrying)", style::kBoldRed);
    lines.push_back(std::move(error));
  }

  auto make_table = [&](int bar_width) {
    Table table({{"ID"},
                 {"STATE"},
                 {"RUN", Align::kRight},
                 {"QUEUE", Align::kRight},
                 {"KV POOL"},
                 {"USE", Align::kRight},
                 {"GEN/S", Align::kRight},
                 {"SPEC", Align::kRight},
                 {"DPx", Align::kRight},
                 {"FWD%", Align::kRight},
                 {"HB", Align::kRight}});
    for (const TopRow& r : rows) {
      table.add_row(
          {Cell(r.id), Cell(r.state, state_style(r.state)), Cell(format_fixed(r.running, 0)),
           Cell(format_fixed(r.queued, 0), r.queued.value_or(0) > 0 ? style::kYellow : style::kNone),
           kv_bar(r, bar_width), Cell(format_percent(r.token_usage), usage_style(r.token_usage)),
           Cell(r.gen_throughput ? format_rate(*r.gen_throughput) : "-"),
           Cell(format_fixed(r.spec_accept_length, 2)), Cell(format_fixed(r.dp_imbalance, 2)),
           Cell(format_fixed(r.fwd_occupancy, 0)),
           Cell(format_age(r.heartbeat_age.value_or(kNoValue)),
                shm::rank_state_from_name(r.state) == shm::RankState::kStalled ? style::kYellow
                                                                               : style::kNone)});
    }
    return table;
  };
  // The KV bar takes whatever width the other columns leave (one column spare), within 10..40.
  constexpr int kNarrowBar = 10;
  int bar_width = 20;
  if (f.interactive) {
    const std::vector<StyledLine> probe = make_table(kNarrowBar).layout();
    const int narrow_width = static_cast<int>(probe.front().width());
    bar_width = std::clamp(kNarrowBar + columns - narrow_width - 1, kNarrowBar, 40);
  }
  const Table table = make_table(bar_width);
  std::vector<StyledLine> body = table.layout(f.interactive ? style::kReverse : style::kBold);
  const int footer = f.interactive ? 1 : 0;
  const int room =
      max_lines > 0 ? max_lines - static_cast<int>(lines.size()) - footer : static_cast<int>(body.size());
  const bool cut = static_cast<int>(body.size()) > room;
  const int shown = cut ? std::max(1, room - 1) : static_cast<int>(body.size());
  for (int i = 0; i < shown && i < static_cast<int>(body.size()); ++i) {
    lines.push_back(std::move(body[static_cast<std::size_t>(i)]));
  }
  if (cut) {
    StyledLine more;
    more.add(
        "+" + std::to_string(static_cast<int>(body.size()) - shown) + " more ranks (enlarge the terminal)",
        style::kDim);
    lines.push_back(std::move(more));
  }
  if (rows.empty()) {
    StyledLine none;
    none.add("(no ranks)", style::kDim);
    lines.push_back(std::move(none));
  }
  if (f.interactive) {
    StyledLine keys;
    keys.add("q", style::kBold);
    keys.add(" quit  ");
    keys.add("s", style::kBold);
    keys.add(" sort  ");
    keys.add("r", style::kBold);
    keys.add(" reverse   KV POOL: ");
    keys.add("#", style::kRed);
    keys.add(" used ");
    keys.add("+", style::kYellow);
    keys.add(" evictable ");
    keys.add(".", style::kGreen);
    keys.add(" available   DPx: KV load / mean of DP peers");
    while (max_lines > 0 && static_cast<int>(lines.size()) < max_lines - 1) lines.emplace_back();
    lines.push_back(std::move(keys));
  }
  return lines;
}

boost::json::value optional_json(std::optional<double> v) {
  if (v && std::isfinite(*v)) return *v;
  return nullptr;
}

bool wanted(const boost::json::value& detail, const std::vector<std::string>& instances) {
  if (instances.empty()) return true;
  const std::string instance = string_at(detail, {"instance"});
  return std::find(instances.begin(), instances.end(), instance) != instances.end();
}

}  // namespace

std::string_view sort_key_name(SortKey key) {
  for (const auto& [k, name] : kSortNames) {
    if (k == key) return name;
  }
  return "id";
}

std::optional<SortKey> sort_key_from_name(std::string_view name) {
  for (const auto& [k, n] : kSortNames) {
    if (n == name) return k;
  }
  return std::nullopt;
}

std::vector<std::string> sort_key_names() {
  std::vector<std::string> names;
  for (const auto& [k, name] : kSortNames) names.emplace_back(name);
  return names;
}

std::vector<TopRow> make_rows(const boost::json::array& details, SortKey sort, bool reverse) {
  std::vector<TopRow> rows;
  rows.reserve(details.size());
  for (const auto& d : details) rows.push_back(row_from(d));
  fill_dp_imbalance(rows);
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const TopRow& a, const TopRow& b) { return row_before(a, b, sort, reverse); });
  return rows;
}

boost::json::object row_json(const TopRow& r) {
  boost::json::object o;
  o["id"] = r.id;
  o["instance"] = r.instance;
  o["role"] = r.role;
  o["state"] = r.state;
  o["tp_rank"] = optional_json(r.tp_rank);
  o["pp_rank"] = optional_json(r.pp_rank);
  o["dp_rank"] = optional_json(r.dp_rank);
  o["num_running_reqs"] = optional_json(r.running);
  o["num_queue_reqs"] = optional_json(r.queued);
  o["kv_used_tokens"] = optional_json(r.kv_used);
  o["kv_evictable_tokens"] = optional_json(r.kv_evictable);
  o["kv_available_tokens"] = optional_json(r.kv_available);
  o["token_usage"] = optional_json(r.token_usage);
  o["gen_throughput"] = optional_json(r.gen_throughput);
  o["spec_accept_length"] = optional_json(r.spec_accept_length);
  o["dp_imbalance"] = optional_json(r.dp_imbalance);
  o["fwd_occupancy"] = optional_json(r.fwd_occupancy);
  o["heartbeat_age_seconds"] = optional_json(r.heartbeat_age);
  return o;
}

int run_top(RankSource& source, const TopOptions& initial) {
  TopOptions options = initial;
  SignalPipe signals;
  Screen screen(STDOUT_FILENO, STDIN_FILENO);
  // NOLINTNEXTLINE(concurrency-mt-unsafe): the CLI reads its environment on its only thread
  const char* term = std::getenv("TERM");
  const bool dumb_terminal = term != nullptr && std::string_view(term) == "dumb";
  const bool interactive = !options.json && ::isatty(STDOUT_FILENO) != 0 && !dumb_terminal;
  Frame frame;
  frame.source = source.description();
  frame.interactive = interactive;

  boost::json::array details;
  std::vector<TopRow> rows;
  int refreshes = 0;
  int exit_code = 0;

  auto fetch = [&]() -> bool {
    try {
      boost::json::object doc = source.all_details();
      auto* all = doc.if_contains("ranks");
      if (all == nullptr || !all->is_array()) throw SourceError("the rank list has no \"ranks\" array");
      details.clear();
      for (auto& d : all->as_array()) {
        if (wanted(d, options.instances)) details.emplace_back(std::move(d));
      }
      const auto* rejected = doc.if_contains("rejected_segments");
      frame.rejected =
          rejected != nullptr && rejected->is_object() ? rejected->as_object() : boost::json::object();
      frame.error.clear();
      exit_code = 0;
      return true;
    } catch (const SourceUnavailable& e) {
      frame.error = e.what();
      exit_code = 3;
    } catch (const SourceError& e) {
      frame.error = e.what();
      exit_code = 1;
    }
    return false;
  };

  auto show = [&]() {
    rows = make_rows(details, options.sort, options.reverse);
    frame.options = options;
    if (options.json) {
      boost::json::object doc;
      doc["time"] =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      boost::json::array list;
      for (const TopRow& r : rows) list.emplace_back(row_json(r));
      doc["ranks"] = std::move(list);
      doc["rejected_segments"] = frame.rejected;
      if (!frame.error.empty()) doc["error"] = frame.error;
      std::cout << boost::json::serialize(doc) << std::endl;
      return;
    }
    if (interactive) {
      const TerminalSize size = terminal_size(STDOUT_FILENO);
      std::vector<std::string> text;
      for (const StyledLine& line : render_frame(rows, frame, size.columns, size.rows)) {
        text.push_back(line.render(options.color, static_cast<std::size_t>(size.columns)));
      }
      screen.draw(text);
      return;
    }
    if (!frame.error.empty()) std::cerr << "rankstat top: " << frame.error << "\n";
    for (const StyledLine& line : render_frame(rows, frame, 0, 0)) std::cout << line.render(false) << "\n";
    std::cout << std::endl;
  };

  // The first refresh decides whether there is anything to watch at all.
  if (!fetch()) {
    std::cerr << "rankstat: " << frame.error << "\n";
    return exit_code;
  }
  if (interactive) screen.enter();
  bool quit = false;
  bool keys_open = true;
  while (!quit) {
    show();
    ++refreshes;
    if (options.iterations > 0 && refreshes >= options.iterations) break;
    const auto next = std::chrono::steady_clock::now() + options.interval;
    while (!quit) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      const nfds_t count = screen.reads_keys() && keys_open ? 2 : 1;
      const int ready = ::poll(fds, count, static_cast<int>(left.count()));
      if (ready <= 0) continue;
      bool redraw = false;
      if ((fds[0].revents & POLLIN) != 0) {
        for (int signo : signals.take()) {
          if (signo == SIGINT || signo == SIGTERM || signo == SIGHUP) {
            quit = true;
          } else if (signo == SIGTSTP) {
            // Give the terminal back, stop for real, and take it again on SIGCONT.
            const bool was_active = screen.active();
            screen.leave();
            ::signal(SIGTSTP, SIG_DFL);
            ::raise(SIGTSTP);
            signals.rearm(SIGTSTP);
            if (was_active) screen.enter();
            redraw = true;
          } else {
            redraw = true;  // SIGWINCH, SIGCONT
          }
        }
      }
      if (count == 2 && (fds[1].revents & (POLLIN | POLLHUP)) != 0) {
        char keys[32];
        const ssize_t n = ::read(STDIN_FILENO, keys, sizeof keys);
        for (ssize_t i = 0; i < n; ++i) {
          switch (keys[i]) {
            case 'q':
            case 'Q':
            case 3:  // Ctrl-C, should the terminal deliver it as a byte
              quit = true;
              break;
            case 's':
              options.sort = static_cast<SortKey>((static_cast<int>(options.sort) + 1) % kSortKeyCount);
              redraw = true;
              break;
            case 'S':
              options.sort =
                  static_cast<SortKey>((static_cast<int>(options.sort) + kSortKeyCount - 1) % kSortKeyCount);
              redraw = true;
              break;
            case 'r':
            case 'R':
              options.reverse = !options.reverse;
              redraw = true;
              break;
            default:
              break;
          }
        }
        if (n <= 0 && (fds[1].revents & POLLHUP) != 0) keys_open = false;  // the terminal went away
      }
      if (redraw && !quit && interactive) show();
    }
    if (!quit) fetch();
  }
  screen.leave();
  // Leaving on q, Ctrl-C or SIGTERM is a clean exit; after --iterations, the last refresh decides.
  return quit ? 0 : exit_code;
}

}  // namespace rankstat::cli
