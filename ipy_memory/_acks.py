"""What AutoRecall does not recall for: pure acknowledgements ("ok thanks", "好的 谢谢"), as regexes
over a normalised query."""

from __future__ import annotations

import re
import unicodedata

# Pure acknowledgements carry no question to recall for (English and Chinese).
DEFAULT_ACKS = (
    "ok", "okay", "k", "kk", "thanks", "thank you", "thx", "ty", "yes", "yeah", "yep", "yup", "no", "nope",
    "sure", "cool", "great", "nice", "good", "fine", "alright", "all right", "got it", "understood", "continue",
    "go on", "go ahead", "next", "done", "hi", "hello", "hey", "bye", "lgtm", "sounds good", "perfect", "right",
    "please", "proceed", "keep going", "please continue", "thanks a lot", "many thanks",
    "继续", "继续吧", "请继续", "好的", "好", "好吧", "好滴", "嗯", "嗯嗯", "谢谢", "多谢", "感谢", "可以", "行",
    "对", "对的", "是", "是的", "没问题", "收到", "明白", "明白了", "知道了", "下一步", "没事", "不用了", "哦", "噢",
)


def ack_pattern(words=DEFAULT_ACKS) -> str:
    """A regex matching any run of the given acknowledgement words (e.g. 'ok thanks', '好的 谢谢')."""
    alts = "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))
    return rf"(?:(?:{alts})\s*)+"


DEFAULT_SKIP_PATTERNS = (ack_pattern(),)


def normalize_query(text: str) -> str:
    """NFKC, case-folded, punctuation and symbols turned into spaces: what skip patterns match."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(c if (c.isalnum() or c.isspace()) else " " for c in text)
    return " ".join(text.split())
