#!/usr/bin/env python3
"""Write the text front end's expected outputs (tests/data/text/*.tsv) by running the official
CosyVoice front end (its text_normalize with the wetext normalizers, inflect and frontend_utils).

    tools/golden_text.py --cosyvoice DIR --tokenizer TOKDIR [-o tests/data/text]

Run it from a virtual environment outside the repository that has `wetext` (the version written
into the files' headers), `inflect`, `regex` and `transformers` installed; DIR is a checkout of
FunAudioLLM/CosyVoice (only cosyvoice/utils/frontend_utils.py and cosyvoice/cli/frontend.py are
read). The method CosyVoiceFrontEnd.text_normalize is taken from frontend.py's source (ast) and run
on a stand-in object holding what it uses (the wetext Normalizer(remove_erhua=False) and
Normalizer() objects, inflect.engine(), the Qwen2 tokenizer with CosyVoice3's added special
tokens), so no model, torch or onnxruntime is needed. The tokenizer is TOKDIR's vocab.json /
merges.txt / tokenizer_config.json plus added_tokens.json's additional_special_tokens.

Files (UTF-8, one case per line, fields separated by TAB; backslash escapes \\\\ \\t \\n \\r in
fields):
    N <input> <text_normalize(input, split=False)>
    S <input> <segment 1> <segment 2> ...        (text_normalize(input, split=True))
    W <input> <wetext Normalizer().normalize(input)>
    P <input> <spell_out_number(input)>
The cases are the lists below (CASES_ZH, CASES_EN, ...), written for this project.
"""
import argparse
import ast
import importlib.util
import json
import os
import re
import sys
from functools import partial
from typing import Generator

CASES_ZH = [
    # numbers
    "我有1个苹果。", "一共2个人。", "今年是2024年。", "数字0和00和007。", "他考了100分。", "共计1000000元。",
    "人口约14亿。", "大约3.1415926。", "负数-5很冷。", "温度是-3.5度。", "编号12345678901234567890。",
    "第1名和第22名。", "第3次会议。", "1/3的人同意。", "3/4的面积。", "比例是1:2。", "比分3:2。",
    "增长了45%。", "下降了0.5%。", "百分之百是100%。", "200万人参加。", "12万3千元。",
    # dates and times
    "2024年3月5日下午3点。", "今天是2024-03-05。", "生日是1999/12/31。", "会议在2023年10月1日举行。",
    "现在是15:30。", "时间是08:05:09。", "下午3点15分。", "上午9:00开始。", "晚上11点半。",
    "2024年3月5日 下午3点", "1月1日是元旦。", "12月25日。", "公元前221年。", "21世纪。",
    # money
    "价格是¥100。", "花了$3.50。", "共计100元。", "单价12.5元。", "人民币1000元。", "100美元。",
    "￥25.80。", "€50。", "£20。", "5块钱。", "3毛钱。",
    # units and measures
    "速度是100km/h。", "重量是5kg。", "长度是3.5m。", "面积是20m²。", "体积是2m³。", "温度是25℃。",
    "容量是500ml。", "距离是10公里。", "身高180cm。", "功率是100W。", "电压220V。", "时长90min。",
    "内存16GB。", "网速100Mbps。", "3天2夜。", "每小时60公里。",
    # phones and ids
    "电话13812345678。", "请拨打010-12345678。", "客服电话400-800-8888。", "紧急电话110。",
    "座机是(010)12345678。", "手机号是+86 13912345678。", "邮编100000。", "身份证号110101199001011234。",
    # mixed zh/en
    "我喜欢iPhone 15。", "这是GPT-4模型。", "用Python 3.11写的。", "COVID-19疫情。", "他在NBA打球。",
    "我们用的是Windows 10系统。", "版本号v2.0.1。", "去了Starbucks喝咖啡。", "AI技术发展很快。",
    "这个API的QPS是1000。", "打开www.example.com网站。", "邮箱是test@example.com。",
    "CPU占用90%。", "他说 hello world 然后走了。", "中文 English 混合 text 测试。",
    # punctuation and brackets
    "你好！！！", "真的吗？？", "好的。。。", "嗯……", "这个（那个）不好。", "【重要】通知。",
    "他说：“你好”。", "书名《三体》。", "他——一个好人——走了。", "`代码`部分。", "你好，", "你好、",
    "你好，，", "这是第一句,", "一 - 二", "a - b是中文。", "她说：\"走吧。\"我们就走了。",
    "前面 有 空格 的 中文。", "  首尾空白  中文  ", "换行\n中文\n测试。", "制表\t中文。",
    "中文.句号.测试", "面积1²和体积1³。", "第1.2节。", "1.5倍。",
    # erhua (kept)
    "哪儿有2个玩意儿？", "一会儿3点见。",
    # long paragraphs (splitter)
    "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出反应的智能机器。"
    "该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。人工智能从诞生以来，理论和技术日益成熟，"
    "应用领域也不断扩大，可以设想，未来人工智能带来的科技产品，将会是人类智慧的容器。人工智能可以对人的意识、思维的"
    "信息过程进行模拟。人工智能不是人的智能，但能像人那样思考、也可能超过人的智能。2024年，人工智能行业市场规模达到"
    "了5000亿元，同比增长30%。",
    "今天天气很好。我们去公园玩吧！好啊，几点出发？下午2点怎么样？可以。那我们在门口见；不见不散：好的。",
    "第一段话说了很多很多的内容，包括各种各样的细节和描述，这些内容都非常重要，需要仔细阅读和理解才能明白其中的含义。"
    "第二段话继续讲述了相关的内容，并且补充了一些新的信息，这些信息对于理解整个故事非常关键，不能忽略。第三段话是总结。",
    "短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。"
    "短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。短句。",
    "没有标点的一句很长的话" * 12,
    "他说：“我们走吧。”然后我们就走了。她问：“去哪里？”我说：“不知道。”",
    "。。。", "！", "？！", "……", "你好", "好",
]

CASES_EN = [
    # numbers
    "I have 1 apple.", "There are 2 cats.", "The year 2024 was good.", "0 and 00 and 007.",
    "He scored 100 points.", "A total of 1000000 dollars.", "About 3.14159.", "It is -5 outside.",
    "Minus -3.5 degrees.", "The number 12345678901234567890.", "123456789", "42", "1000001 people.",
    "1,000 people came.", "1,234,567 votes.", "Pi is 3.14.", "Room 101.", "Call me at 5.",
    "Between 10 and 20.", "1100000 units.", "2000 years.", "He is 45 years old.",
    # ordinals
    "He came 1st.", "The 2nd place.", "The 3rd time.", "The 4th of July.", "The 21st century.",
    "The 22nd floor.", "The 101st day.", "The 1000th visitor.",
    # money
    "It costs $3.50.", "It costs $100.", "I paid $1,000,000.", "It costs $0.99.", "Only 50 cents.",
    "The price is €20.", "It was £5.", "¥1000 yen.", "$5 million.", "$2.5 billion.", "USD 100.",
    # dates and times
    "I have $3.50 on 12/05.", "On 12/05/2024 we met.", "On 2024-03-05.", "March 5, 2024.",
    "On Jan. 1st, 2020.", "In 1999.", "In the 1990s.", "At 3:30pm.", "At 3:30 PM.", "At 10:00 am.",
    "At 15:45.", "At 08:05:09.", "Meet at 7 p.m.", "The 80s and 90s.", "From 2010 to 2020.",
    "Monday, June 1, 2020.",
    # units
    "100 km/h.", "5kg of rice.", "3.5 m long.", "20 m² flat.", "25°C today.", "500 ml of water.",
    "10 miles.", "180 cm tall.", "100 W bulb.", "220V power.", "90 min.", "16 GB RAM.",
    "100 Mbps.", "5 ft 10 in.", "2 lbs.", "30 mph.", "70°F.", "1.5 L bottle.",
    # percentages and fractions
    "Up 45%.", "Down 0.5%.", "100% sure.", "1/3 of them.", "3/4 cup.", "2 1/2 hours.",
    # phones
    "Call 555-123-4567.", "Call +1 (800) 555 0199.", "My number is 123-456-7890.", "Dial 911.",
    "Call 1-800-FLOWERS.",
    # abbreviations
    "Dr. Smith is here.", "Mr. and Mrs. Jones.", "He lives on Baker St.", "It's 5 p.m.",
    "e.g. this one.", "i.e. that one.", "etc.", "Prof. Lee.", "St. Louis.", "U.S.A.", "NASA and FBI.",
    "vs. them.", "Jr. and Sr.", "Ave. Main.",
    # electronic
    "Visit www.example.com.", "Email test@example.com.", "See https://example.com/a?b=1.",
    # mixed and misc
    "I love iPhone 15.", "GPT-4 is a model.", "Python 3.11 is out.", "COVID-19.", "Windows 10.",
    "Version v2.0.1.", "A4 paper.", "B2B sales.", "MP3 player.", "The 3D movie.", "24/7 service.",
    "Hello, world!", "What?!", "Wait...", "Yes; no: maybe.", "He said \"hi.\" Then left.",
    "(parenthesis) and [brackets].", "Dash - here.", "Em—dash.", "A & B.", "#1 fan.", "50/50.",
    "  leading and trailing spaces  ", "Tabs\tand\nnewlines.", "Don't stop.", "It's 3 o'clock.",
    "rock 'n' roll.", "Ünïcödé café 5.", "x²", "Superscript ² alone.", "Arabic ٣ digit.",
    "Fullwidth １２３.", "Mixed 12abc34.",
    # long paragraphs (splitter)
    "Artificial intelligence is the intelligence of machines or software, as opposed to the "
    "intelligence of humans or animals. It is a field of study in computer science that develops "
    "and studies intelligent machines. Such machines may be called AIs. AI technology is widely "
    "used throughout industry, government, and science. Some high-profile applications are "
    "advanced web search engines, recommendation systems, understanding human speech, "
    "self-driving cars, generative and creative tools, and superhuman play in strategy games such "
    "as chess and Go. In 2023, the market grew by 30% to $200 billion.",
    "Short one. Short two. Short three. Short four. Short five. Short six. Short seven. Short "
    "eight. Short nine. Short ten. Short eleven. Short twelve. Short thirteen. Short fourteen. "
    "Short fifteen. Short sixteen. Short seventeen. Short eighteen. Short nineteen. Short twenty.",
    "This is a very long sentence without any ending punctuation that just keeps going and going "
    "with more and more words so that it is longer than eighty tokens for sure because it has so "
    "many words in it and they never stop coming one after another after another after another",
    "Question one? Answer one! Note: this; that. \"Quoted.\" End.",
    "First sentence is here. Second sentence follows it closely. Third sentence adds detail. "
    "Fourth sentence adds more. Fifth sentence is the last one before a tiny tail. Tail.",
    "!!!", "...", "?", "Hello", "A.",
]

# longer than one normalization pass of the library (lib/text/normalize.h COSY_TN_PASS_BYTES)
_ZH_LONG = [c for c in CASES_ZH if c.startswith("人工智能是")][0]
_EN_LONG = [c for c in CASES_EN if c.startswith("Artificial intelligence")][0]
CASES_LONG = [
    " ".join([_EN_LONG] * 4),
    "\n".join([_EN_LONG] * 3),
    "".join([_ZH_LONG] * 3),
    "\n".join([_ZH_LONG] * 3),
    _ZH_LONG + _EN_LONG + _ZH_LONG + " " + _EN_LONG,
    " ".join(["Item %d costs $%d.%02d; order %d units by %d/%d/20%02d." % (i, i * 3, i * 7 % 100, i * 11,
                                                                       i % 12 + 1, i % 28 + 1, i % 30)
              for i in range(1, 60)]),
    "".join(["第%d项的价格是%d.%02d元，请在20%02d年%d月%d日前订购%d件。" % (i, i * 3, i * 7 % 100, i % 30,
                                                          i % 12 + 1, i % 28 + 1, i * 11)
             for i in range(1, 45)]),
]

# text holding both "<|" and "|>" passes untouched
CASES_RAW = [
    "You are a helpful assistant.<|endofprompt|>I have 2 apples.",
    "<|endofprompt|>今天是2024年3月5日。",
    "Use <|im_start|> but not the end.",
]


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_text_normalize(frontend_py, fu):
    """CosyVoiceFrontEnd.text_normalize compiled from frontend.py's source alone."""
    src = open(frontend_py, encoding="utf-8").read()
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "text_normalize":
            mod = ast.Module(body=[node], type_ignores=[])
            ns = {"json": json, "re": re, "Generator": Generator, "partial": partial,
                  "logging": __import__("logging")}
            for k in ("contains_chinese", "replace_blank", "replace_corner_mark", "remove_bracket",
                      "spell_out_number", "split_paragraph", "is_only_punctuation"):
                ns[k] = getattr(fu, k)
            exec(compile(mod, frontend_py, "exec"), ns)
            return ns["text_normalize"]
    raise SystemExit(f"{frontend_py}: no text_normalize")


class Tok:
    def __init__(self, tok_dir):
        from transformers import AutoTokenizer
        with open(os.path.join(tok_dir, "added_tokens.json"), encoding="utf-8") as fh:
            added = [t["content"] for t in json.load(fh)["additional_special_tokens"]]
        self.t = AutoTokenizer.from_pretrained(tok_dir)
        self.t.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                                   "additional_special_tokens": added})

    def encode(self, text, **kwargs):
        return self.t([text])["input_ids"][0]


def esc(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cosyvoice", required=True, help="checkout of FunAudioLLM/CosyVoice")
    ap.add_argument("--tokenizer", required=True, help="directory of vocab.json, merges.txt, "
                    "tokenizer_config.json, added_tokens.json")
    ap.add_argument("-o", "--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                          "data", "text"))
    a = ap.parse_args()
    import inflect
    import wetext
    from importlib.metadata import version
    fu = load_module(os.path.join(a.cosyvoice, "cosyvoice", "utils", "frontend_utils.py"), "fu")
    text_normalize = load_text_normalize(os.path.join(a.cosyvoice, "cosyvoice", "cli",
                                                      "frontend.py"), fu)

    class FE:
        pass
    fe = FE()
    fe.text_frontend = "wetext"
    fe.zh_tn_model = wetext.Normalizer(remove_erhua=False)
    fe.en_tn_model = wetext.Normalizer()
    fe.inflect_parser = inflect.engine()
    fe.tokenizer = Tok(a.tokenizer)
    fe.allowed_special = "all"
    os.makedirs(a.out, exist_ok=True)
    head = (f"# made by tools/golden_text.py with wetext {version('wetext')}, inflect "
            f"{version('inflect')}, regex {version('regex')}, transformers "
            f"{version('transformers')}; format in the tool's docstring\n")
    counts = {}
    for name, cases in (("zh", CASES_ZH), ("en", CASES_EN), ("long", CASES_LONG),
                        ("raw", CASES_RAW)):
        lines = [head]
        for c in cases:
            try:
                text_normalize(fe, c, split=True)
            except Exception as exc:  # the official code raises: not a parity case
                print(f"skipped {c!r}: {type(exc).__name__} {exc}", file=sys.stderr)
                continue
            lines.append("N\t%s\t%s\n" % (esc(c), esc(text_normalize(fe, c, split=False))))
            segs = text_normalize(fe, c, split=True)
            lines.append("S\t%s\n" % "\t".join(esc(x) for x in [c] + list(segs)))
            if name not in ("raw", "long"):
                lines.append("W\t%s\t%s\n" % (esc(c), esc(fe.en_tn_model.normalize(c))))
            if name == "en":
                lines.append("P\t%s\t%s\n" % (esc(c), esc(fu.spell_out_number(c, fe.inflect_parser))))
        with open(os.path.join(a.out, name + ".tsv"), "w", encoding="utf-8") as fh:
            fh.writelines(lines)
        counts[name] = len(lines) - 1
    # number spelling on its own: every run of digits the tests care about
    nums = [str(i) for i in list(range(0, 1101)) + [1999, 2000, 2001, 2024, 10000, 10001, 100000,
                                                     100001, 1000000, 1000001, 1100000, 1234567,
                                                     10 ** 9, 10 ** 12 + 7, 10 ** 35, 10 ** 36 - 1]]
    nums += ["007", "0000", "01", "٣", "١٢٣", "²", "12²3"]
    with open(os.path.join(a.out, "numbers.tsv"), "w", encoding="utf-8") as fh:
        fh.write(head)
        for s in nums:
            fh.write("P\t%s\t%s\n" % (esc(s), esc(fu.spell_out_number(s, fe.inflect_parser))))
    counts["numbers"] = len(nums)
    print("wrote", a.out, counts)


if __name__ == "__main__":
    main()
