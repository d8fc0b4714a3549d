"""SmolLM2's tokenizer.json (the staged dummy-model tokenizer, .dev/c1/models/_tokenizer) plus the four Qwen vision
tokens at ids 49152-49155, as qwen36-27b-mtp-vl's config.json names them (image_token_id 49154, video 49155,
vision_start 49152, vision_end 49153). Usage: python3 make_tokenizer.py SRC_TOKENIZER_JSON OUT_JSON"""

import json
import sys
from pathlib import Path

src, out = sys.argv[1], sys.argv[2]
tok = json.loads(Path(src).read_text())
for i, s in enumerate(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]):
    tok["added_tokens"].append({"id": 49152 + i, "content": s, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
Path(out).write_text(json.dumps(tok))
