// The cumulative block: counters, histograms and standalone gauges as running state.
//
// Protocol (docs/shm-layout.md, "Cumulative block"):
//   registration (writer): fill descriptor i and its bounds  ->  series_count.store(i + 1, release)
//   reader:                n = series_count.load(acquire)    ->  descriptors [0, n) are immutable
//   counter:   value word stored relaxed by the single writer; a reader sees some recent total.
//   gauge, histogram: a per-series sequence word; writer seq+1 (relaxed), words (release), seq+2
//              (release); reader seq (acquire), words (acquire), seq again (relaxed), retries while
//              odd or changed (bounded). A reader that sees any word of update N is thereby ordered
//              after that update's seq+1, so its second seq load cannot return the value it started
//              with. No standalone fences: ThreadSanitizer cannot model them (GCC 12 rejects them
//              under -fsanitize=thread), and release stores / acquire loads are plain moves on x86.
// Everything that must survive a dropped ring record or a daemon restart lives here.
//
// The block's code is cut by job; this header includes every part:
//   text_rules.hpp         strict UTF-8, metric and label names
//   label_lists.hpp        the label-list encodings (series labels, header extra labels)
//   series_rules.hpp       SeriesRefusal and the checks a series must pass
//   cumulative_region.hpp  the regions in a mapping, double-valued words
//   cumulative_pages.hpp   which pages are backed, and their reservation
//   cumulative_writer.hpp  registration and updates
//   cumulative_reader.hpp  descriptor validation and value reads
#pragma once

#include "rankstat/shmproto/cumulative_pages.hpp"
#include "rankstat/shmproto/cumulative_reader.hpp"
#include "rankstat/shmproto/cumulative_region.hpp"
#include "rankstat/shmproto/cumulative_writer.hpp"
#include "rankstat/shmproto/label_lists.hpp"
#include "rankstat/shmproto/series_rules.hpp"
#include "rankstat/shmproto/text_rules.hpp"
