// Speculative decoding in the engine (engine.h, engine/spec/): each step's drafts, proposed
// for the decoding sequences before the scheduler runs, and the verification's counts after.
#include <algorithm>

#include "engine/engine_internal.h"
#include "engine/spec/draft_model_proposer.h"

namespace sluice {

void Engine::propose_drafts() {
  struct Offer {
    spec::Proposer* proposer;
    spec::DraftQuery query;
    std::vector<int32_t> draft;
  };
  std::vector<Offer> offers;
  for (spec::Proposer* p : {prediction_.get(), ngram_.get(), draft_.get()}) {
    if (p == nullptr) continue;
    std::vector<spec::DraftQuery> queries;
    for (const auto& [id, c] : computations_) {
      if (c->proposer != p || !scheduler_.has(id) || !scheduler_.is_decoding(id)) continue;
      // A step emits the accepted drafts and one more token: never past max_new.
      const int32_t room = std::min(config_.spec.num_tokens, c->max_new - c->num_output - 1);
      if (room < 1) continue;
      queries.push_back(
          {id, scheduler_.tokens(id), static_cast<int32_t>(c->request.prompt_tokens.size()), room, runner_.sampler(id)});
    }
    if (queries.empty()) continue;
    if (p->costly()) {  // asked below, for as many drafts as are chosen
      for (const spec::DraftQuery& q : queries) offers.push_back({p, q, {}});
      continue;
    }
    std::vector<std::vector<int32_t>> drafts;
    p->propose(queries, drafts);
    for (size_t i = 0; i < queries.size(); ++i) {
      if (drafts[i].size() > static_cast<size_t>(queries[i].max_tokens)) drafts[i].resize(queries[i].max_tokens);
      if (!drafts[i].empty()) offers.push_back({p, queries[i], std::move(drafts[i])});
    }
  }
  if (offers.empty()) return;
  // How many drafts each: all on offer, or what the adaptive policy picks.
  std::vector<int32_t> k(offers.size());
  for (size_t i = 0; i < offers.size(); ++i) {
    k[i] = offers[i].proposer->costly() ? offers[i].query.max_tokens : static_cast<int32_t>(offers[i].draft.size());
  }
  if (config_.spec.adaptive) {
    int32_t num_decoding = 0;
    for (const auto& [id, c] : computations_) num_decoding += scheduler_.has(id) && scheduler_.is_decoding(id);
    std::vector<spec::DraftLength::Candidate> candidates;
    for (size_t i = 0; i < offers.size(); ++i) {
      candidates.push_back({offers[i].query.seq_id, offers[i].proposer->name(), k[i], offers[i].proposer->costly()});
    }
    // Decodes only: every running sequence decodes and nobody waiting can be admitted.
    const bool pure_decode = num_decoding == scheduler_.num_running() &&
                             (scheduler_.num_waiting() == 0 || scheduler_.num_running() >= config_.max_num_seqs);
    k = draft_length_.choose(num_decoding, candidates, pure_decode);
    // The outcomes of past steps can overrule the estimates (draft_length.h, Outcomes).
    if (pure_decode && std::any_of(k.begin(), k.end(), [](int32_t n) { return n > 0; }) &&
        !draft_length_.allow_drafts(num_decoding)) {
      std::fill(k.begin(), k.end(), 0);
    }
  }
  // The draft model drafts now, batched over the sequences it was asked for.
  std::vector<spec::DraftQuery> costly;
  std::vector<size_t> costly_offer;
  for (size_t i = 0; i < offers.size(); ++i) {
    if (!offers[i].proposer->costly() || k[i] == 0) continue;
    costly.push_back(offers[i].query);
    costly.back().max_tokens = k[i];
    costly_offer.push_back(i);
  }
  if (!costly.empty()) {
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> drafts;
    draft_->propose(costly, drafts);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // Per pass actually run (none when every sequence was skipped: nothing to learn from).
    const int32_t passes = draft_->last_passes();
    if (passes > 0) draft_length_.observe_draft_pass(static_cast<int32_t>(costly.size()), seconds / passes);
    for (size_t j = 0; j < costly.size(); ++j) offers[costly_offer[j]].draft = std::move(drafts[j]);
  }
  for (size_t i = 0; i < offers.size(); ++i) {
    Offer& o = offers[i];
    if (o.draft.size() > static_cast<size_t>(k[i])) o.draft.resize(k[i]);
    if (!o.draft.empty()) scheduler_.set_draft(o.query.seq_id, std::move(o.draft));
  }
}

void Engine::count_drafts(const ScheduleOutput& out, std::span<const SampledToken> sampled) {
  size_t next = 0;
  MutexLock lock(metrics_mu_);
  for (const ScheduledSeq& ss : out.seqs) {
    if (!ss.sample) continue;
    size_t end = next;
    while (end < sampled.size() && sampled[end].seq_id == ss.seq_id) ++end;
    const auto accepted = static_cast<int32_t>(end - next) - 1;
    next = end;
    if (ss.num_draft == 0) continue;
    Computation& c = *computations_.at(ss.seq_id);
    draft_length_.observe_verify(ss.seq_id, c.proposer->name(), ss.num_draft, accepted);
    c.num_draft_tokens += ss.num_draft;
    EngineMetrics::SpecStats& st = metrics_.spec[std::string(c.proposer->name())];
    ++st.num_drafts;
    st.num_draft_tokens += ss.num_draft;
    st.num_accepted_tokens += accepted;
    if (st.accepted_per_position.size() < static_cast<size_t>(config_.spec.num_tokens)) {
      st.accepted_per_position.resize(config_.spec.num_tokens);
    }
    for (int32_t i = 0; i < accepted; ++i) ++st.accepted_per_position[i];
  }
}

}  // namespace sluice
